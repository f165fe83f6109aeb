//! Command-line flags for the two cluster connections, shared by every binary that talks to
//! both clusters (the fetcher, the verifier, the one-shot group sync).

use clap::Args;

use crate::connection::ClusterSettings;

/// Source and destination connections: bootstrap servers, `key=value` librdkafka properties,
/// and properties whose values are read from files (mounted Secrets).
#[derive(Debug, Clone, Args)]
pub struct ClusterFlags {
    /// Source bootstrap servers.
    #[arg(long, env = "KMIRROR_SOURCE_BOOTSTRAP")]
    pub source_bootstrap: String,
    /// Source librdkafka property, `key=value` (repeatable).
    #[arg(long = "source-property")]
    pub source_properties: Vec<String>,
    /// Source property read from a file, `key=/path` (repeatable; for secrets).
    #[arg(long = "source-property-file")]
    pub source_property_files: Vec<String>,
    /// Destination bootstrap servers.
    #[arg(long, env = "KMIRROR_DESTINATION_BOOTSTRAP")]
    pub destination_bootstrap: String,
    /// Destination librdkafka property, `key=value` (repeatable).
    #[arg(long = "destination-property")]
    pub destination_properties: Vec<String>,
    /// Destination property read from a file, `key=/path` (repeatable; for secrets).
    #[arg(long = "destination-property-file")]
    pub destination_property_files: Vec<String>,
}

impl ClusterFlags {
    /// The source connection.
    pub fn source(&self) -> Result<ClusterSettings, String> {
        ClusterSettings::from_flags(
            &self.source_bootstrap,
            &self.source_properties,
            &self.source_property_files,
        )
    }

    /// The destination connection.
    pub fn destination(&self) -> Result<ClusterSettings, String> {
        ClusterSettings::from_flags(
            &self.destination_bootstrap,
            &self.destination_properties,
            &self.destination_property_files,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        clusters: ClusterFlags,
    }

    #[test]
    fn flags_become_settings_for_each_side() {
        let cli = Cli::try_parse_from([
            "x",
            "--source-bootstrap",
            "a:9092",
            "--source-property",
            "security.protocol=SSL",
            "--destination-bootstrap",
            "b:9092",
            "--destination-property-file",
            "sasl.password=/etc/secret/password",
        ])
        .unwrap();
        let source = cli.clusters.source().unwrap();
        assert_eq!(source.bootstrap_servers, "a:9092");
        assert_eq!(source.properties["security.protocol"], "SSL");
        let destination = cli.clusters.destination().unwrap();
        assert_eq!(destination.bootstrap_servers, "b:9092");
        assert_eq!(
            destination.property_files["sasl.password"],
            std::path::PathBuf::from("/etc/secret/password")
        );
        let bad = Cli::try_parse_from([
            "x",
            "--source-bootstrap",
            "a",
            "--destination-bootstrap",
            "b",
            "--source-property",
            "no-equals-sign",
        ])
        .unwrap();
        assert!(bad.clusters.source().is_err());
    }
}
