//! Kafka client settings for one cluster: bootstrap servers, plain properties, and properties
//! whose values are read from files (mounted Secrets) so they never appear in arguments or logs.

use std::collections::BTreeMap;
use std::path::PathBuf;

use rdkafka::ClientConfig;
use thiserror::Error;

/// A property file could not be read.
#[derive(Debug, Error)]
#[error("cannot read the value of {property} from {path}: {source}")]
pub struct ConnectionError {
    /// The property.
    pub property: String,
    /// The file.
    pub path: PathBuf,
    /// The I/O error.
    #[source]
    pub source: std::io::Error,
}

/// Settings for connecting to one cluster. Its `Debug` shows secret-bearing properties as
/// `<redacted>`.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ClusterSettings {
    /// `host:port,...`.
    pub bootstrap_servers: String,
    /// librdkafka properties.
    pub properties: BTreeMap<String, String>,
    /// librdkafka properties whose value is the content of a file (trailing newline removed).
    pub property_files: BTreeMap<String, PathBuf>,
}

/// Every property of `config` with its value — secrets included (`ClientConfig::config_map`
/// masks them): for kmirror's wire client, which takes the same properties. Never log it.
pub fn properties(config: &ClientConfig) -> BTreeMap<String, String> {
    config
        .config_map()
        .into_keys()
        .map(|k| (k.to_string(), config.get(k).unwrap_or_default().to_string()))
        .collect()
}

impl std::fmt::Debug for ClusterSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let properties: BTreeMap<&str, &str> = self
            .properties
            .iter()
            .map(|(k, v)| {
                let shown = if kmirror_crds::client_properties::is_secret(k) {
                    "<redacted>"
                } else {
                    v.as_str()
                };
                (k.as_str(), shown)
            })
            .collect();
        f.debug_struct("ClusterSettings")
            .field("bootstrap_servers", &self.bootstrap_servers)
            .field("properties", &properties)
            .field("property_files", &self.property_files)
            .finish()
    }
}

impl ClusterSettings {
    /// Settings with just the bootstrap servers.
    pub fn new(bootstrap_servers: impl Into<String>) -> ClusterSettings {
        ClusterSettings {
            bootstrap_servers: bootstrap_servers.into(),
            ..Default::default()
        }
    }

    /// Adds a property.
    pub fn with(mut self, key: &str, value: &str) -> ClusterSettings {
        self.properties.insert(key.to_string(), value.to_string());
        self
    }

    /// Builds an rdkafka configuration, reading file-backed properties now.
    pub fn client_config(&self) -> Result<ClientConfig, ConnectionError> {
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", &self.bootstrap_servers);
        for (k, v) in &self.properties {
            config.set(k, v);
        }
        for (k, path) in &self.property_files {
            let value = std::fs::read_to_string(path).map_err(|source| ConnectionError {
                property: k.clone(),
                path: path.clone(),
                source,
            })?;
            config.set(k, value.trim_end_matches(['\n', '\r']));
        }
        Ok(config)
    }

    /// Settings from command-line flags: bootstrap servers, `key=value` properties and
    /// `key=/path` properties whose values are read from files.
    pub fn from_flags(
        bootstrap: &str,
        properties: &[String],
        property_files: &[String],
    ) -> Result<ClusterSettings, String> {
        Ok(ClusterSettings {
            bootstrap_servers: bootstrap.to_string(),
            properties: ClusterSettings::parse_pairs(properties)?,
            property_files: ClusterSettings::parse_pairs(property_files)?
                .into_iter()
                .map(|(k, v)| (k, PathBuf::from(v)))
                .collect(),
        })
    }

    /// Parses `key=value` pairs (flag values) into the property map.
    pub fn parse_pairs<'a>(
        pairs: impl IntoIterator<Item = &'a String>,
    ) -> Result<BTreeMap<String, String>, String> {
        pairs
            .into_iter()
            .map(|pair| {
                pair.split_once('=')
                    .map(|(k, v)| (k.trim().to_string(), v.to_string()))
                    .filter(|(k, _)| !k.is_empty())
                    .ok_or_else(|| format!("expected key=value, got {pair:?}"))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_a_secret_value() {
        let s = ClusterSettings::new("k:9092")
            .with("sasl.password", "hunter2")
            .with("ssl.key.pem", "-----BEGIN PRIVATE KEY-----")
            .with("sasl.oauthbearer.client.secret", "oauth-secret")
            .with("client.id", "visible");
        let shown = format!("{s:?}");
        for secret in ["hunter2", "BEGIN PRIVATE KEY", "oauth-secret"] {
            assert!(!shown.contains(secret), "{shown}");
        }
        assert!(
            shown.contains("visible") && shown.contains("<redacted>"),
            "{shown}"
        );
    }

    #[test]
    fn file_properties_are_read_and_trimmed() {
        let dir = std::env::temp_dir().join(format!("kmirror-conn-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("password");
        std::fs::write(&file, "s3cret\n").unwrap();
        let mut s = ClusterSettings::new("a:1").with("sasl.mechanism", "PLAIN");
        s.property_files.insert("sasl.password".into(), file);
        let c = s.client_config().unwrap();
        assert_eq!(c.get("sasl.password"), Some("s3cret"));
        assert_eq!(c.get("bootstrap.servers"), Some("a:1"));
        s.property_files
            .insert("sasl.username".into(), dir.join("missing"));
        let err = s.client_config().unwrap_err();
        assert!(err.to_string().contains("sasl.username"), "{err}");
        assert!(!err.to_string().contains("s3cret"));
    }

    #[test]
    fn pairs_parse() {
        let pairs = vec!["a=1".to_string(), "b.c=x=y".to_string()];
        let m = ClusterSettings::parse_pairs(&pairs).unwrap();
        assert_eq!(m["a"], "1");
        assert_eq!(m["b.c"], "x=y");
        assert!(ClusterSettings::parse_pairs(&["nope".to_string()]).is_err());
    }
}
