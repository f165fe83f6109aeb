//! How kmirror connects to a Kafka cluster: bootstrap servers, TLS, SASL, extra client properties.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::SecretKeyRef;

/// librdkafka properties that carry secret material. They may never be set through
/// `properties`; use the Secret references of the `tls` and `sasl` blocks instead.
pub const SECRET_PROPERTIES: &[&str] = &[
    "sasl.password",
    "sasl.username",
    "sasl.jaas.config",
    "sasl.oauthbearer.client.secret",
    "sasl.oauthbearer.config",
    "ssl.key.password",
    "ssl.key.pem",
    "ssl.keystore.password",
    "ssl_key",
];

/// Connection settings for one Kafka cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, kube::KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = kube::core::Rule::new(crate::client_properties::cel_rule(
        crate::client_properties::Client::Connection,
        "properties",
    ))
    .message("properties takes only tuning keys (client.id, socket.*, reconnect/retry backoffs, metadata ages, message sizes); connection, security and secret settings belong to kmirror: use bootstrapServers and the tls/sasl blocks with Secret references")
    .reason(kube::core::Reason::FieldValueForbidden),
    validation = kube::core::Rule::new("!has(self.sasl) || has(self.tls) || (has(self.allowInsecure) && self.allowInsecure)")
        .message("SASL without TLS sends the credentials readable on the network: add the tls block, or set allowInsecure: true to accept that (kmirror then raises a Warning)")
        .reason(kube::core::Reason::FieldValueForbidden),
    validation = kube::core::Rule::new("!has(self.tls) || !has(self.tls.verifyHostname) || self.tls.verifyHostname || (has(self.allowInsecure) && self.allowInsecure)")
        .message("tls.verifyHostname: false accepts a certificate issued for another host: set allowInsecure: true to accept that (kmirror then raises a Warning)")
        .reason(kube::core::Reason::FieldValueForbidden),
    validation = kube::core::Rule::new("!has(self.sasl) || !has(self.sasl.oauth) || self.sasl.oauth.tokenEndpointUrl.startsWith('https://') || (has(self.allowInsecure) && self.allowInsecure)")
        .message("an http:// token endpoint sends the OAuth client secret readable on the network: use https://, or set allowInsecure: true to accept that (kmirror then raises a Warning)")
        .reason(kube::core::Reason::FieldValueForbidden),
)]
pub struct KafkaConnection {
    /// Comma-separated `host:port` list of brokers to bootstrap from.
    #[schemars(
        length(min = 1, max = 4096),
        regex(pattern = r"^[^,\s:]+:[0-9]{1,5}(,[^,\s:]+:[0-9]{1,5})*$")
    )]
    pub bootstrap_servers: String,
    /// The Kafka cluster ID this connection must reach. When set, a cluster reporting another ID
    /// is a hard failure (protects against pointing a mirror at the wrong cluster).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[A-Za-z0-9_-]{22}$"))]
    pub cluster_id: Option<String>,
    /// TLS settings. Absent: plaintext (or SASL_PLAINTEXT with `sasl`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsConfig>,
    /// SASL authentication. Absent: no SASL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sasl: Option<SaslConfig>,
    /// Extra librdkafka client properties: tuning keys only (for example `client.id`,
    /// `socket.keepalive.enable`; the list is in `kmirror_crds::client_properties`). Connection,
    /// security and secret settings are refused here.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 64))]
    pub properties: BTreeMap<String, String>,
    /// Accept a connection that exposes credentials or skips a check: SASL without TLS,
    /// `tls.verifyHostname: false`, an `http://` OAuth token endpoint. Refused without it; with
    /// it kmirror raises a Warning Event and condition naming what is insecure.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_insecure: bool,
}

/// TLS towards the cluster; every certificate and key comes from a Secret.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, kube::KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new("has(self.clientCert) == has(self.clientKey)")
    .message("tls.clientCert and tls.clientKey must be given together (mutual TLS needs both)")
    .reason(kube::core::Reason::FieldValueRequired))]
pub struct TlsConfig {
    /// PEM CA bundle that signs the brokers' certificates. Absent: the system trust store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca: Option<SecretKeyRef>,
    /// PEM client certificate for mutual TLS (with `clientKey`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_cert: Option<SecretKeyRef>,
    /// PEM private key of the client certificate (with `clientCert`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_key: Option<SecretKeyRef>,
    /// Check that the broker certificate matches the host name (default true).
    #[serde(default = "default_true")]
    pub verify_hostname: bool,
}

fn default_true() -> bool {
    true
}

/// SASL mechanism.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum SaslMechanism {
    /// Username and password, sent as is (use with TLS).
    #[serde(rename = "PLAIN")]
    Plain,
    /// Salted challenge-response, SHA-256.
    #[serde(rename = "SCRAM-SHA-256")]
    ScramSha256,
    /// Salted challenge-response, SHA-512.
    #[serde(rename = "SCRAM-SHA-512")]
    ScramSha512,
    /// OAuth 2 bearer tokens fetched from an OIDC token endpoint (client credentials).
    #[serde(rename = "OAUTHBEARER")]
    OAuthBearer,
}

impl SaslMechanism {
    /// The mechanism name as Kafka and librdkafka spell it.
    pub fn as_kafka_str(self) -> &'static str {
        match self {
            SaslMechanism::Plain => "PLAIN",
            SaslMechanism::ScramSha256 => "SCRAM-SHA-256",
            SaslMechanism::ScramSha512 => "SCRAM-SHA-512",
            SaslMechanism::OAuthBearer => "OAUTHBEARER",
        }
    }
}

/// SASL credentials. PLAIN and SCRAM take a username (inline or from a Secret) and a password
/// from a Secret; OAUTHBEARER takes the `oauth` block.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, kube::KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = kube::core::Rule::new("self.mechanism == 'OAUTHBEARER' || (has(self.password) && (has(self.username) != has(self.usernameSecret)))")
        .message("PLAIN and SCRAM need a password Secret and exactly one of username or usernameSecret")
        .reason(kube::core::Reason::FieldValueRequired),
    validation = kube::core::Rule::new("self.mechanism != 'OAUTHBEARER' || has(self.oauth)")
        .message("OAUTHBEARER needs the oauth block")
        .reason(kube::core::Reason::FieldValueRequired),
    validation = kube::core::Rule::new("self.mechanism == 'OAUTHBEARER' || !has(self.oauth)")
        .message("the oauth block is only valid with mechanism OAUTHBEARER")
        .reason(kube::core::Reason::FieldValueForbidden),
)]
pub struct SaslConfig {
    /// The SASL mechanism.
    pub mechanism: SaslMechanism,
    /// Username, inline (a username is not a secret). Exclusive with `usernameSecret`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    pub username: Option<String>,
    /// Username read from a Secret. Exclusive with `username`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username_secret: Option<SecretKeyRef>,
    /// Password read from a Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<SecretKeyRef>,
    /// OAUTHBEARER client-credentials settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oauth: Option<OAuthConfig>,
}

/// OAuth 2 client credentials for SASL/OAUTHBEARER (OIDC token endpoint).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OAuthConfig {
    /// Token endpoint URL of the identity provider.
    #[schemars(regex(pattern = r"^https?://"))]
    pub token_endpoint_url: String,
    /// OAuth client ID.
    #[schemars(length(min = 1))]
    pub client_id: String,
    /// OAuth client secret, read from a Secret.
    pub client_secret: SecretKeyRef,
    /// Requested scope, space separated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
}

impl KafkaConnection {
    /// Every Secret reference of this connection, with the role it plays (for mounting and for
    /// clear "missing Secret" messages).
    pub fn secret_refs(&self) -> Vec<(&'static str, &SecretKeyRef)> {
        let mut refs = Vec::new();
        if let Some(tls) = &self.tls {
            if let Some(r) = &tls.ca {
                refs.push(("tls.ca", r));
            }
            if let Some(r) = &tls.client_cert {
                refs.push(("tls.clientCert", r));
            }
            if let Some(r) = &tls.client_key {
                refs.push(("tls.clientKey", r));
            }
        }
        if let Some(sasl) = &self.sasl {
            if let Some(r) = &sasl.username_secret {
                refs.push(("sasl.usernameSecret", r));
            }
            if let Some(r) = &sasl.password {
                refs.push(("sasl.password", r));
            }
            if let Some(oauth) = &sasl.oauth {
                refs.push(("sasl.oauth.clientSecret", &oauth.client_secret));
            }
        }
        refs
    }

    /// What is insecure about this connection (credentials readable on the network, a check
    /// skipped), whether or not `allowInsecure` accepts it.
    pub fn insecure_settings(&self) -> Vec<&'static str> {
        let mut out = Vec::new();
        if self.sasl.is_some() && self.tls.is_none() {
            out.push("SASL without TLS: the credentials cross the network readable");
        }
        if self.tls.as_ref().is_some_and(|t| !t.verify_hostname) {
            out.push(
                "tls.verifyHostname is false: a certificate issued for another host is accepted",
            );
        }
        if self
            .sasl
            .as_ref()
            .and_then(|s| s.oauth.as_ref())
            .is_some_and(|o| !o.token_endpoint_url.starts_with("https://"))
        {
            out.push("the OAuth token endpoint is not https: the client secret crosses the network readable");
        }
        out
    }

    /// The Kafka `security.protocol` this connection implies.
    pub fn security_protocol(&self) -> &'static str {
        match (self.tls.is_some(), self.sasl.is_some()) {
            (false, false) => "PLAINTEXT",
            (true, false) => "SSL",
            (false, true) => "SASL_PLAINTEXT",
            (true, true) => "SASL_SSL",
        }
    }
}
