//! rdkafka client configurations for every listener and principal of the test bed, and small
//! helpers tests share (unique names, topic creation).

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;

use crate::Testbed;

/// Who connects to the destination cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DestUser {
    /// Super user.
    Admin,
    /// The principal fetchers use.
    Mirror,
    /// An application principal with no ACLs unless a test creates them.
    App,
}

impl DestUser {
    fn credentials(self, bed: &Testbed) -> (&str, &str) {
        match self {
            DestUser::Admin => (bed.var("KMIRROR_ADMIN_USER"), bed.var("KMIRROR_ADMIN_PASSWORD")),
            DestUser::Mirror => (bed.var("KMIRROR_MIRROR_USER"), bed.var("KMIRROR_MIRROR_PASSWORD")),
            DestUser::App => (bed.var("KMIRROR_APP_USER"), bed.var("KMIRROR_APP_PASSWORD")),
        }
    }
}

impl Testbed {
    /// Source cluster over PLAINTEXT.
    pub fn source_config(&self) -> ClientConfig {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", self.source_bootstrap());
        c
    }

    /// Source cluster over SASL_SSL with SCRAM-SHA-512, verifying the bed's CA.
    pub fn source_sasl_ssl_config(&self) -> ClientConfig {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", self.var("KMIRROR_SOURCE_SASL_SSL_BOOTSTRAP"))
            .set("security.protocol", "SASL_SSL")
            .set("sasl.mechanism", "SCRAM-SHA-512")
            .set("sasl.username", self.var("KMIRROR_ADMIN_USER"))
            .set("sasl.password", self.var("KMIRROR_ADMIN_PASSWORD"))
            .set("ssl.ca.location", self.var("KMIRROR_CA"))
            .set("ssl.endpoint.identification.algorithm", "https");
        c
    }

    /// Source cluster over mutual TLS with the bed's client certificate.
    pub fn source_mtls_config(&self) -> ClientConfig {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", self.var("KMIRROR_SOURCE_MTLS_BOOTSTRAP"))
            .set("security.protocol", "SSL")
            .set("ssl.ca.location", self.var("KMIRROR_CA"))
            .set("ssl.certificate.location", self.var("KMIRROR_CLIENT_CERT"))
            .set("ssl.key.location", self.var("KMIRROR_CLIENT_KEY"));
        c
    }

    /// Destination cluster over SASL_PLAINTEXT with the given user and mechanism
    /// (`PLAIN`, `SCRAM-SHA-256` or `SCRAM-SHA-512`).
    pub fn dest_config_with(&self, user: DestUser, mechanism: &str) -> ClientConfig {
        let (name, password) = user.credentials(self);
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", self.dest_bootstrap())
            .set("security.protocol", "SASL_PLAINTEXT")
            .set("sasl.mechanism", mechanism)
            .set("sasl.username", name)
            .set("sasl.password", password);
        c
    }

    /// Destination cluster over SASL PLAIN.
    pub fn dest_config(&self, user: DestUser) -> ClientConfig {
        self.dest_config_with(user, "PLAIN")
    }
}

/// A topic (or group) name unique within this test process and across runs.
pub fn unique_name(prefix: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis()
        % 100_000_000;
    format!("{prefix}-{t}-{}-{n}", std::process::id())
}

/// Creates a topic with replication factor 1 and the given configs, waiting for the result.
pub async fn create_topic(
    config: &ClientConfig,
    name: &str,
    partitions: i32,
    configs: &[(&str, &str)],
) -> anyhow::Result<()> {
    let admin: AdminClient<DefaultClientContext> = config.create()?;
    let mut topic = NewTopic::new(name, partitions, TopicReplication::Fixed(1));
    for (k, v) in configs {
        topic = topic.set(k, v);
    }
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    for result in admin.create_topics([&topic], &opts).await? {
        result.map_err(|(t, e)| anyhow::anyhow!("creating topic {t}: {e}"))?;
    }
    Ok(())
}
