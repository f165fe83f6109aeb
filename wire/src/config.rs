//! Client settings read from the librdkafka-style `key=value` properties kmirror passes around:
//! bootstrap servers, security protocol, SASL, TLS, OAuth (OIDC client credentials) and timeouts.
//!
//! Properties that configure security and that this client does not implement are an error
//! naming the key, so a connection is never weaker than asked. Tuning properties meant for
//! librdkafka's consumer and producer ([`crate::IGNORED_TUNING_KEYS`]) are accepted and ignored: the
//! batch engine sets fetch sizes, waits and acks per request. Other unknown keys are ignored and
//! listed in [`WireConfig::ignored`] for the caller to log.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use crate::error::WireError;
use crate::properties::{IGNORED_TUNING_KEYS, Props, SECURITY_PREFIXES, USED_KEYS};

/// How bytes travel to the brokers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecurityProtocol {
    /// TCP, no authentication.
    Plaintext,
    /// TLS (optionally with a client certificate).
    Ssl,
    /// SASL over TCP.
    SaslPlaintext,
    /// SASL over TLS.
    SaslSsl,
}

impl SecurityProtocol {
    /// TLS is used.
    pub fn uses_tls(self) -> bool {
        matches!(self, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl)
    }

    /// SASL is used.
    pub fn uses_sasl(self) -> bool {
        matches!(
            self,
            SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl
        )
    }
}

/// A SASL mechanism with its credentials.
#[derive(Clone, PartialEq, Eq)]
pub enum SaslMechanism {
    /// `PLAIN`: user name and password in one message.
    Plain {
        /// User name.
        username: String,
        /// Password (never printed).
        password: String,
    },
    /// `SCRAM-SHA-256` / `SCRAM-SHA-512`.
    Scram {
        /// The hash function.
        hash: ScramHash,
        /// User name.
        username: String,
        /// Password (never printed).
        password: String,
    },
    /// `OAUTHBEARER` with tokens from an OIDC client-credentials endpoint.
    OAuthBearer(OidcSettings),
}

impl SaslMechanism {
    /// The mechanism name the broker knows.
    pub fn name(&self) -> &'static str {
        match self {
            SaslMechanism::Plain { .. } => "PLAIN",
            SaslMechanism::Scram {
                hash: ScramHash::Sha256,
                ..
            } => "SCRAM-SHA-256",
            SaslMechanism::Scram {
                hash: ScramHash::Sha512,
                ..
            } => "SCRAM-SHA-512",
            SaslMechanism::OAuthBearer(_) => "OAUTHBEARER",
        }
    }
}

impl fmt::Debug for SaslMechanism {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SaslMechanism::Plain { username, .. } | SaslMechanism::Scram { username, .. } => f
                .debug_struct(self.name())
                .field("username", username)
                .field("password", &"<redacted>")
                .finish(),
            SaslMechanism::OAuthBearer(oidc) => f.debug_tuple(self.name()).field(oidc).finish(),
        }
    }
}

/// The hash of a SCRAM mechanism.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScramHash {
    /// SHA-256.
    Sha256,
    /// SHA-512.
    Sha512,
}

/// OAuth 2 client-credentials settings (`sasl.oauthbearer.method=oidc`).
#[derive(Clone, PartialEq, Eq)]
pub struct OidcSettings {
    /// The token endpoint (`http://` or `https://`).
    pub token_endpoint: String,
    /// Client id.
    pub client_id: String,
    /// Client secret (never printed).
    pub client_secret: String,
    /// Requested scope, if any.
    pub scope: Option<String>,
    /// SASL extensions (`key=value` pairs sent with the token).
    pub extensions: Vec<(String, String)>,
    /// CA certificates for an `https://` endpoint (`https.ca.location`); `None`: the system's.
    pub https_ca: Option<PemSource>,
}

impl fmt::Debug for OidcSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OidcSettings")
            .field("token_endpoint", &self.token_endpoint)
            .field("client_id", &self.client_id)
            .field("client_secret", &"<redacted>")
            .field("scope", &self.scope)
            .field("extensions", &self.extensions)
            .field("https_ca", &self.https_ca)
            .finish()
    }
}

/// Where a PEM document comes from: a file or the property's own value.
#[derive(Clone, PartialEq, Eq)]
pub enum PemSource {
    /// A file path (`ssl.*.location`).
    File(PathBuf),
    /// Inline PEM text (`ssl.*.pem`; never printed).
    Inline(String),
}

impl fmt::Debug for PemSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PemSource::File(p) => write!(f, "File({})", p.display()),
            PemSource::Inline(_) => f.write_str("Inline(<pem>)"),
        }
    }
}

/// TLS settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    /// CA certificates to trust; `None`: the system's trust store.
    pub ca: Option<PemSource>,
    /// Client certificate chain (mutual TLS).
    pub certificate: Option<PemSource>,
    /// Client private key (mutual TLS), unencrypted PKCS#8, PKCS#1 or SEC1 PEM.
    pub key: Option<PemSource>,
    /// Verify the broker's certificate chain (`enable.ssl.certificate.verification`).
    pub verify_certificate: bool,
    /// Verify that the certificate names the broker host
    /// (`ssl.endpoint.identification.algorithm=https`, the default).
    pub verify_hostname: bool,
}

/// Settings of one cluster connection.
#[derive(Debug, Clone)]
pub struct WireConfig {
    /// Bootstrap brokers, `host:port`.
    pub bootstrap: Vec<String>,
    /// `client.id` sent with every request.
    pub client_id: String,
    /// Transport.
    pub security_protocol: SecurityProtocol,
    /// SASL mechanism and credentials, when the protocol uses SASL.
    pub sasl: Option<SaslMechanism>,
    /// TLS settings, when the protocol uses TLS.
    pub tls: Option<TlsSettings>,
    /// Time allowed for TCP connect, TLS, ApiVersions and SASL together.
    pub connect_timeout: Duration,
    /// Time allowed for a response (a Fetch's own wait is added to it).
    pub request_timeout: Duration,
    /// Largest response frame accepted.
    pub max_response_bytes: usize,
    /// Pause before retrying a failed metadata refresh or connection.
    pub retry_backoff: Duration,
    /// Metadata older than this is refreshed before use.
    pub metadata_max_age: Duration,
    /// Keys that were neither used nor known tuning keys (for the caller to log).
    pub ignored: Vec<String>,
}

impl WireConfig {
    /// Settings from librdkafka-style properties (`bootstrap.servers` included). Secret values
    /// read from files must already be in the map.
    pub fn from_properties(properties: &BTreeMap<String, String>) -> Result<WireConfig, WireError> {
        let props = Props(properties);
        let mut ignored = Vec::new();
        for key in properties.keys() {
            if USED_KEYS.contains(&key.as_str()) || IGNORED_TUNING_KEYS.contains(&key.as_str()) {
                continue;
            }
            if key == "ssl.key.password" {
                return Err(WireError::config(
                    key,
                    "encrypted private keys are not supported by the wire client; \
                     provide an unencrypted PKCS#8 key (openssl pkcs8 -topk8 -nocrypt)",
                ));
            }
            if SECURITY_PREFIXES.iter().any(|p| key.starts_with(p)) {
                return Err(WireError::config(
                    key,
                    "not supported by the wire client (a security setting it cannot honour)",
                ));
            }
            ignored.push(key.clone());
        }

        let servers = props
            .get("bootstrap.servers")
            .or_else(|| props.get("metadata.broker.list"))
            .ok_or_else(|| WireError::config("bootstrap.servers", "required"))?;
        let bootstrap = parse_bootstrap(servers)?;

        let security_protocol = match props
            .get("security.protocol")
            .unwrap_or("plaintext")
            .to_ascii_lowercase()
            .as_str()
        {
            "plaintext" => SecurityProtocol::Plaintext,
            "ssl" => SecurityProtocol::Ssl,
            "sasl_plaintext" => SecurityProtocol::SaslPlaintext,
            "sasl_ssl" => SecurityProtocol::SaslSsl,
            other => {
                return Err(WireError::config(
                    "security.protocol",
                    format!("expected PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL, got {other:?}"),
                ));
            }
        };

        let sasl = if security_protocol.uses_sasl() {
            Some(sasl_settings(&props)?)
        } else {
            None
        };
        let tls = if security_protocol.uses_tls() {
            Some(tls_settings(&props)?)
        } else {
            None
        };

        let max_response = props
            .get("receive.message.max.bytes")
            .map(|v| {
                v.parse::<usize>().map_err(|_| {
                    WireError::config(
                        "receive.message.max.bytes",
                        format!("expected bytes, got {v:?}"),
                    )
                })
            })
            .transpose()?
            .unwrap_or(200 * 1024 * 1024);

        Ok(WireConfig {
            bootstrap,
            client_id: props.get("client.id").unwrap_or("kmirror").to_string(),
            security_protocol,
            sasl,
            tls,
            connect_timeout: props.millis("socket.connection.setup.timeout.ms", 30_000)?,
            request_timeout: props.millis("request.timeout.ms", 30_000)?,
            max_response_bytes: max_response,
            retry_backoff: props.millis("retry.backoff.ms", 100)?,
            metadata_max_age: props.millis("metadata.max.age.ms", 300_000)?,
            ignored,
        })
    }

    /// Settings from `(key, value)` pairs (e.g. an rdkafka `ClientConfig`'s map).
    pub fn from_pairs<'a>(
        pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<WireConfig, WireError> {
        let map = pairs
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        WireConfig::from_properties(&map)
    }
}

fn parse_bootstrap(servers: &str) -> Result<Vec<String>, WireError> {
    let mut out = Vec::new();
    for server in servers.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        // librdkafka accepts an optional `proto://` prefix.
        let server = server.split_once("://").map_or(server, |(_, rest)| rest);
        let valid_port = server
            .rsplit_once(':')
            .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
        if !valid_port {
            return Err(WireError::config(
                "bootstrap.servers",
                format!("expected host:port, got {server:?}"),
            ));
        }
        out.push(server.to_string());
    }
    if out.is_empty() {
        return Err(WireError::config("bootstrap.servers", "no broker given"));
    }
    Ok(out)
}

fn sasl_settings(props: &Props<'_>) -> Result<SaslMechanism, WireError> {
    let key = if props.get("sasl.mechanism").is_some() {
        "sasl.mechanism"
    } else {
        "sasl.mechanisms"
    };
    let mechanism = props.get(key).unwrap_or("GSSAPI").to_ascii_uppercase();
    let credentials = |what: &str| {
        Ok::<_, WireError>((
            props.require("sasl.username", &format!("for {what}"))?,
            props.require("sasl.password", &format!("for {what}"))?,
        ))
    };
    match mechanism.as_str() {
        "PLAIN" => {
            let (username, password) = credentials("PLAIN")?;
            Ok(SaslMechanism::Plain { username, password })
        }
        "SCRAM-SHA-256" | "SCRAM-SHA-512" => {
            let (username, password) = credentials(&mechanism)?;
            let hash = if mechanism.ends_with("256") {
                ScramHash::Sha256
            } else {
                ScramHash::Sha512
            };
            Ok(SaslMechanism::Scram {
                hash,
                username,
                password,
            })
        }
        "OAUTHBEARER" => {
            let method = props
                .get("sasl.oauthbearer.method")
                .unwrap_or("default")
                .to_ascii_lowercase();
            if method != "oidc" {
                return Err(WireError::config(
                    "sasl.oauthbearer.method",
                    "the wire client fetches OAUTHBEARER tokens only with method oidc \
                     (client credentials)",
                ));
            }
            let token_endpoint = props.require(
                "sasl.oauthbearer.token.endpoint.url",
                "for sasl.oauthbearer.method=oidc",
            )?;
            if !(token_endpoint.starts_with("http://") || token_endpoint.starts_with("https://")) {
                return Err(WireError::config(
                    "sasl.oauthbearer.token.endpoint.url",
                    "expected an http:// or https:// URL",
                ));
            }
            let extensions = match props.get("sasl.oauthbearer.extensions") {
                None => Vec::new(),
                Some(list) => list
                    .split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(|pair| {
                        pair.split_once('=')
                            .map(|(k, v)| (k.to_string(), v.to_string()))
                            .ok_or_else(|| {
                                WireError::config(
                                    "sasl.oauthbearer.extensions",
                                    "expected key=value pairs separated by commas",
                                )
                            })
                    })
                    .collect::<Result<_, _>>()?,
            };
            Ok(SaslMechanism::OAuthBearer(OidcSettings {
                token_endpoint,
                client_id: props.require(
                    "sasl.oauthbearer.client.id",
                    "for sasl.oauthbearer.method=oidc",
                )?,
                client_secret: props.require(
                    "sasl.oauthbearer.client.secret",
                    "for sasl.oauthbearer.method=oidc",
                )?,
                scope: props.get("sasl.oauthbearer.scope").map(str::to_string),
                extensions,
                https_ca: props.pem("https.ca.location", "https.ca.pem")?,
            }))
        }
        other => Err(WireError::config(
            key,
            format!(
                "{other} is not supported by the wire client \
                 (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER are)"
            ),
        )),
    }
}

fn tls_settings(props: &Props<'_>) -> Result<TlsSettings, WireError> {
    let verify_hostname = match props
        .get("ssl.endpoint.identification.algorithm")
        .unwrap_or("https")
        .to_ascii_lowercase()
        .as_str()
    {
        "https" => true,
        "none" => false,
        other => {
            return Err(WireError::config(
                "ssl.endpoint.identification.algorithm",
                format!("expected https or none, got {other:?}"),
            ));
        }
    };
    let certificate = props.pem("ssl.certificate.location", "ssl.certificate.pem")?;
    let key = props.pem("ssl.key.location", "ssl.key.pem")?;
    if certificate.is_some() != key.is_some() {
        return Err(WireError::config(
            if certificate.is_some() {
                "ssl.key.location"
            } else {
                "ssl.certificate.location"
            },
            "a client certificate needs both ssl.certificate.location and ssl.key.location",
        ));
    }
    Ok(TlsSettings {
        ca: props.pem("ssl.ca.location", "ssl.ca.pem")?,
        certificate,
        key,
        verify_certificate: props.bool("enable.ssl.certificate.verification", true)?,
        verify_hostname,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(pairs: &[(&str, &str)]) -> Result<WireConfig, WireError> {
        WireConfig::from_pairs(pairs.iter().copied())
    }

    #[test]
    fn plaintext_defaults() {
        let c = config(&[("bootstrap.servers", "a:1, b:2")]).unwrap();
        assert_eq!(c.bootstrap, vec!["a:1", "b:2"]);
        assert_eq!(c.security_protocol, SecurityProtocol::Plaintext);
        assert!(c.sasl.is_none() && c.tls.is_none());
        assert_eq!(c.request_timeout, Duration::from_secs(30));
        assert_eq!(c.client_id, "kmirror");
    }

    #[test]
    fn sasl_ssl_scram_with_ca() {
        let c = config(&[
            ("bootstrap.servers", "h:9094"),
            ("security.protocol", "SASL_SSL"),
            ("sasl.mechanism", "SCRAM-SHA-512"),
            ("sasl.username", "u"),
            ("sasl.password", "hunter2"),
            ("ssl.ca.location", "/ca.pem"),
            ("linger.ms", "5"),
            ("request.timeout.ms", "1500"),
        ])
        .unwrap();
        assert_eq!(c.sasl.as_ref().unwrap().name(), "SCRAM-SHA-512");
        let tls = c.tls.as_ref().unwrap();
        assert_eq!(tls.ca, Some(PemSource::File("/ca.pem".into())));
        assert!(tls.verify_certificate && tls.verify_hostname);
        assert_eq!(c.request_timeout, Duration::from_millis(1500));
        assert!(c.ignored.is_empty(), "linger.ms is a known tuning key");
        let debug = format!("{c:?}");
        assert!(!debug.contains("hunter2"), "{debug}");
    }

    #[test]
    fn oauth_needs_oidc() {
        let base = [
            ("bootstrap.servers", "h:1"),
            ("security.protocol", "SASL_PLAINTEXT"),
            ("sasl.mechanism", "OAUTHBEARER"),
        ];
        let e = config(&base).unwrap_err();
        assert!(e.to_string().contains("sasl.oauthbearer.method"), "{e}");
        let mut full = base.to_vec();
        full.extend([
            ("sasl.oauthbearer.method", "oidc"),
            (
                "sasl.oauthbearer.token.endpoint.url",
                "http://127.0.0.1:1/token",
            ),
            ("sasl.oauthbearer.client.id", "id"),
            ("sasl.oauthbearer.client.secret", "topsecret"),
            ("sasl.oauthbearer.extensions", "a=1,b=2"),
        ]);
        let c = config(&full).unwrap();
        match c.sasl.as_ref().unwrap() {
            SaslMechanism::OAuthBearer(o) => {
                assert_eq!(
                    o.extensions,
                    vec![("a".into(), "1".into()), ("b".into(), "2".into())]
                );
            }
            other => panic!("{other:?}"),
        }
        assert!(!format!("{c:?}").contains("topsecret"));
    }

    #[test]
    fn unsupported_security_keys_are_errors_naming_the_key() {
        for (key, value) in [
            ("ssl.keystore.location", "/ks.p12"),
            ("ssl.key.password", "s3cret-pass"),
            ("sasl.kerberos.service.name", "kafka"),
            ("ssl.crl.location", "/crl"),
            ("enable.sasl.oauthbearer.unsecure.jwt", "true"),
        ] {
            let e = config(&[
                ("bootstrap.servers", "h:1"),
                ("security.protocol", "SSL"),
                (key, value),
            ])
            .unwrap_err();
            let text = e.to_string();
            assert!(text.contains(key), "{text}");
            assert!(!text.contains(value), "the value must not appear: {text}");
        }
    }

    #[test]
    fn unknown_tuning_keys_are_listed() {
        let c = config(&[("bootstrap.servers", "h:1"), ("some.new.knob", "1")]).unwrap();
        assert_eq!(c.ignored, vec!["some.new.knob".to_string()]);
    }

    #[test]
    fn bad_values_name_the_key() {
        for (pairs, key) in [
            (vec![("bootstrap.servers", "nohost")], "bootstrap.servers"),
            (
                vec![("bootstrap.servers", "h:1"), ("security.protocol", "tls")],
                "security.protocol",
            ),
            (
                vec![
                    ("bootstrap.servers", "h:1"),
                    ("security.protocol", "SASL_PLAINTEXT"),
                    ("sasl.mechanism", "GSSAPI"),
                ],
                "sasl.mechanism",
            ),
            (
                vec![
                    ("bootstrap.servers", "h:1"),
                    ("security.protocol", "SASL_PLAINTEXT"),
                    ("sasl.mechanism", "PLAIN"),
                    ("sasl.username", "u"),
                ],
                "sasl.password",
            ),
            (
                vec![
                    ("bootstrap.servers", "h:1"),
                    ("security.protocol", "SSL"),
                    ("ssl.certificate.location", "/c.pem"),
                ],
                "ssl.key.location",
            ),
            (
                vec![("bootstrap.servers", "h:1"), ("request.timeout.ms", "soon")],
                "request.timeout.ms",
            ),
        ] {
            let e = config(&pairs).unwrap_err();
            assert!(e.to_string().contains(key), "{key}: {e}");
        }
    }

    #[test]
    fn verification_can_be_relaxed_explicitly() {
        let c = config(&[
            ("bootstrap.servers", "h:1"),
            ("security.protocol", "SSL"),
            ("ssl.endpoint.identification.algorithm", "none"),
            ("enable.ssl.certificate.verification", "false"),
        ])
        .unwrap();
        let tls = c.tls.unwrap();
        assert!(!tls.verify_hostname && !tls.verify_certificate);
    }
}
