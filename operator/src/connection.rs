//! From a `KafkaConnection` to client settings: for the operator's own clients (secret values
//! inline, in memory only) and for fetcher pods (secrets mounted as files, never in arguments).

use std::collections::BTreeMap;
use std::path::PathBuf;

use k8s_openapi::api::core::v1::{KeyToPath, SecretVolumeSource, Volume, VolumeMount};
use kmirror_crds::client_properties::{Client, allowed, canonical};
use kmirror_crds::v1alpha1::{KafkaConnection, SaslMechanism, SecretKeyRef};
use kmirror_state::ClusterSettings;

/// A referenced Secret or key that does not exist.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{role} refers to key {key:?} of Secret {secret:?}, which does not exist")]
pub struct MissingSecret {
    /// Where the reference sits (e.g. `spec.source.sasl.password`).
    pub role: String,
    /// Secret name.
    pub secret: String,
    /// Key.
    pub key: String,
}

/// The label a Secret must carry for kmirror to read it: creating a ClusterMirror must not be a
/// way to read any Secret of the namespace.
pub const CREDENTIALS_LABEL: &str = "kmirror.io/credentials";

/// A referenced Secret that does not opt in with [`CREDENTIALS_LABEL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{role} refers to Secret {secret:?}, which does not carry the label {CREDENTIALS_LABEL}=true: \
     kmirror reads only Secrets labelled for it (kubectl label secret {secret} {CREDENTIALS_LABEL}=true); \
     nothing was sent to the cluster"
)]
pub struct UnlabelledSecret {
    /// Where the reference sits (e.g. `spec.destination`).
    pub role: String,
    /// Secret name.
    pub secret: String,
}

/// Values of the Secret keys a connection refers to, keyed by (secret, key). `Debug` names the
/// keys, never the values.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct SecretValues(BTreeMap<(String, String), Vec<u8>>);

impl SecretValues {
    /// No values.
    pub fn new() -> SecretValues {
        SecretValues::default()
    }
}

impl<const N: usize> From<[((String, String), Vec<u8>); N]> for SecretValues {
    fn from(values: [((String, String), Vec<u8>); N]) -> SecretValues {
        SecretValues(BTreeMap::from(values))
    }
}

impl std::ops::Deref for SecretValues {
    type Target = BTreeMap<(String, String), Vec<u8>>;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl std::ops::DerefMut for SecretValues {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl std::fmt::Debug for SecretValues {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(
                self.0
                    .keys()
                    .map(|(secret, key)| format!("{secret}/{key}: <redacted>")),
            )
            .finish()
    }
}

fn value(values: &SecretValues, field: &str, r: &SecretKeyRef) -> Result<String, MissingSecret> {
    values
        .get(&(r.name.clone(), r.key.clone()))
        .map(|v| {
            String::from_utf8_lossy(v)
                .trim_end_matches(['\n', '\r'])
                .to_string()
        })
        .ok_or_else(|| MissingSecret {
            role: field.to_string(),
            secret: r.name.clone(),
            key: r.key.clone(),
        })
}

/// How a secret-backed setting reaches the client: inline (operator) or as a file (pods).
enum Sink<'a> {
    Inline(&'a SecretValues),
    Files { side: &'a str },
}

fn role_dir(side: &str, role: &str) -> String {
    format!("/etc/kmirror/{side}/{role}")
}

/// Builds settings; `Sink` decides whether secret values are read or referenced as files.
fn build(
    conn: &KafkaConnection,
    field: &str,
    sink: Sink<'_>,
) -> Result<ClusterSettings, MissingSecret> {
    let mut s = ClusterSettings::new(&conn.bootstrap_servers);
    // Tuning keys only (validation refuses the others; this keeps them out regardless), set
    // first: every setting kmirror owns below wins.
    for (k, v) in &conn.properties {
        if allowed(Client::Connection, k) {
            s.properties.insert(k.clone(), v.clone());
        }
    }
    s.properties
        .insert("security.protocol".into(), conn.security_protocol().into());
    // Pure-file settings: inline PEM for the operator, a mounted path for pods.
    let secret = |s: &mut ClusterSettings,
                  role: &str,
                  r: &SecretKeyRef,
                  inline_key: &str,
                  file_key: &str| {
        match &sink {
            Sink::Inline(values) => {
                let v = value(values, &format!("{field}.{role}"), r)?;
                s.properties.insert(inline_key.to_string(), v);
            }
            Sink::Files { side } => {
                let path = PathBuf::from(role_dir(side, &role.replace('.', "-"))).join("value");
                if file_key == inline_key {
                    s.property_files.insert(file_key.to_string(), path);
                } else {
                    s.properties
                        .insert(file_key.to_string(), path.display().to_string());
                }
            }
        }
        Ok::<(), MissingSecret>(())
    };
    if let Some(tls) = &conn.tls {
        if let Some(r) = &tls.ca {
            secret(&mut s, "tls.ca", r, "ssl.ca.pem", "ssl.ca.location")?;
        }
        if let Some(r) = &tls.client_cert {
            secret(
                &mut s,
                "tls.clientCert",
                r,
                "ssl.certificate.pem",
                "ssl.certificate.location",
            )?;
        }
        if let Some(r) = &tls.client_key {
            secret(
                &mut s,
                "tls.clientKey",
                r,
                "ssl.key.pem",
                "ssl.key.location",
            )?;
        }
        s.properties.insert(
            "ssl.endpoint.identification.algorithm".into(),
            if tls.verify_hostname { "https" } else { "none" }.into(),
        );
    }
    if let Some(sasl) = &conn.sasl {
        s.properties.insert(
            "sasl.mechanism".into(),
            sasl.mechanism.as_kafka_str().into(),
        );
        if let Some(u) = &sasl.username {
            s.properties.insert("sasl.username".into(), u.clone());
        }
        if let Some(r) = &sasl.username_secret {
            secret(
                &mut s,
                "sasl.usernameSecret",
                r,
                "sasl.username",
                "sasl.username",
            )?;
        }
        if let Some(r) = &sasl.password {
            secret(&mut s, "sasl.password", r, "sasl.password", "sasl.password")?;
        }
        if sasl.mechanism == SaslMechanism::OAuthBearer
            && let Some(o) = &sasl.oauth
        {
            s.properties
                .insert("sasl.oauthbearer.method".into(), "oidc".into());
            s.properties
                .insert("sasl.oauthbearer.client.id".into(), o.client_id.clone());
            s.properties.insert(
                "sasl.oauthbearer.token.endpoint.url".into(),
                o.token_endpoint_url.clone(),
            );
            if let Some(scope) = &o.scope {
                s.properties
                    .insert("sasl.oauthbearer.scope".into(), scope.clone());
            }
            secret(
                &mut s,
                "sasl.oauth.clientSecret",
                &o.client_secret,
                "sasl.oauthbearer.client.secret",
                "sasl.oauthbearer.client.secret",
            )?;
        }
    }
    Ok(s)
}

/// Settings for the operator's own clients, with secret values inline.
pub fn operator_settings(
    conn: &KafkaConnection,
    field: &str,
    values: &SecretValues,
) -> Result<ClusterSettings, MissingSecret> {
    build(conn, field, Sink::Inline(values))
}

/// Whether `key` is a setting kmirror derived from the connection (not a tuning key).
fn owned(settings: &ClusterSettings, key: &str) -> bool {
    let key = canonical(key);
    settings.property_files.contains_key(key)
        || (settings.properties.contains_key(key) && !allowed(Client::Connection, key))
}

/// Fetcher arguments, volumes and mounts for one side (`source` or `destination`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodConnection {
    /// Command-line arguments.
    pub args: Vec<String>,
    /// Secret volumes.
    pub volumes: Vec<Volume>,
    /// Where they are mounted.
    pub mounts: Vec<VolumeMount>,
}

/// How a fetcher pod connects to one side: plain settings as arguments, secrets as read-only
/// Secret volumes whose files the fetcher reads (`--<side>-property-file`).
pub fn pod_connection(
    conn: &KafkaConnection,
    side: &str,
    extra: &BTreeMap<String, String>,
) -> PodConnection {
    let settings = build(conn, &format!("spec.{side}"), Sink::Files { side })
        .expect("file references cannot be missing");
    let mut out = PodConnection::default();
    out.args.push(format!("--{side}-bootstrap"));
    out.args.push(settings.bootstrap_servers.clone());
    // The fetcher's own tuning keys override the connection's; kmirror's settings stay.
    let client = if side == "source" {
        Client::Consumer
    } else {
        Client::Producer
    };
    let mut properties = settings.properties.clone();
    for (k, v) in extra {
        if allowed(client, k) && !owned(&settings, k) {
            properties.insert(k.clone(), v.clone());
        }
    }
    for (k, v) in &properties {
        out.args.push(format!("--{side}-property"));
        out.args.push(format!("{k}={v}"));
    }
    for (k, path) in &settings.property_files {
        out.args.push(format!("--{side}-property-file"));
        out.args.push(format!("{k}={}", path.display()));
    }
    for (role, r) in conn.secret_refs() {
        let dir = role_dir(side, &role.replace('.', "-"));
        let name = format!("{side}-{}", role.replace('.', "-")).to_lowercase();
        out.volumes.push(Volume {
            name: name.clone(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(r.name.clone()),
                items: Some(vec![KeyToPath {
                    key: r.key.clone(),
                    path: "value".into(),
                    mode: Some(0o440),
                }]),
                default_mode: Some(0o440),
                optional: Some(false),
            }),
            ..Default::default()
        });
        out.mounts.push(VolumeMount {
            name,
            mount_path: dir,
            read_only: Some(true),
            ..Default::default()
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conn() -> KafkaConnection {
        serde_json::from_value(serde_json::json!({
            "bootstrapServers": "k:9093",
            "tls": {"ca": {"name": "tls", "key": "ca.crt"},
                    "clientCert": {"name": "tls", "key": "tls.crt"},
                    "clientKey": {"name": "tls", "key": "tls.key"}},
            "sasl": {"mechanism": "SCRAM-SHA-512", "username": "mirror",
                     "password": {"name": "creds", "key": "password"}},
            "properties": {"client.id": "x"}
        }))
        .unwrap()
    }

    #[test]
    fn operator_settings_inline_every_secret() {
        let mut values = SecretValues::new();
        for (s, k, v) in [
            ("tls", "ca.crt", "CA"),
            ("tls", "tls.crt", "CRT"),
            ("tls", "tls.key", "KEY"),
            ("creds", "password", "pw\n"),
        ] {
            values.insert((s.into(), k.into()), v.as_bytes().to_vec());
        }
        let s = operator_settings(&conn(), "spec.source", &values).unwrap();
        let p = &s.properties;
        assert_eq!(p["security.protocol"], "SASL_SSL");
        assert_eq!(p["ssl.ca.pem"], "CA");
        assert_eq!(p["ssl.certificate.pem"], "CRT");
        assert_eq!(p["ssl.key.pem"], "KEY");
        assert_eq!(p["sasl.mechanism"], "SCRAM-SHA-512");
        assert_eq!(p["sasl.username"], "mirror");
        assert_eq!(p["sasl.password"], "pw");
        assert_eq!(p["client.id"], "x");
        assert!(s.property_files.is_empty());
    }

    #[test]
    fn kmirror_owned_settings_win_over_property_maps() {
        let mut c = conn();
        c.properties
            .insert("security.protocol".into(), "PLAINTEXT".into());
        c.properties
            .insert("socket.keepalive.enable".into(), "true".into());
        let extra = BTreeMap::from([
            (
                "security.protocol".to_string(),
                "SASL_PLAINTEXT".to_string(),
            ),
            (
                "enable.ssl.certificate.verification".to_string(),
                "false".to_string(),
            ),
            (
                "ssl.endpoint.identification.algorithm".to_string(),
                "none".to_string(),
            ),
            ("metadata.broker.list".to_string(), "evil:9092".to_string()),
            ("fetch.wait.max.ms".to_string(), "50".to_string()),
            ("client.id".to_string(), "consumer".to_string()),
        ]);
        let args = pod_connection(&c, "source", &extra).args.join(" ");
        for kept in [
            "--source-bootstrap k:9093",
            "security.protocol=SASL_SSL",
            "ssl.endpoint.identification.algorithm=https",
            "socket.keepalive.enable=true",
            "fetch.wait.max.ms=50",
            "client.id=consumer",
        ] {
            assert!(args.contains(kept), "{kept} in {args}");
        }
        for refused in [
            "PLAINTEXT ",
            "security.protocol=SASL_PLAINTEXT",
            "enable.ssl.certificate.verification",
            "=none",
            "evil",
        ] {
            assert!(!args.contains(refused), "{refused} in {args}");
        }
        let values = SecretValues::from([
            (("tls".into(), "ca.crt".into()), b"CA".to_vec()),
            (("tls".into(), "tls.crt".into()), b"CRT".to_vec()),
            (("tls".into(), "tls.key".into()), b"KEY".to_vec()),
            (("creds".into(), "password".into()), b"pw".to_vec()),
        ]);
        let s = operator_settings(&c, "spec.source", &values).unwrap();
        assert_eq!(s.properties["security.protocol"], "SASL_SSL");
    }

    #[test]
    fn secret_values_do_not_show_in_debug() {
        let values =
            SecretValues::from([(("creds".into(), "password".into()), b"pw-4242".to_vec())]);
        let shown = format!("{values:?}");
        assert!(
            !shown.contains("pw-4242") && shown.contains("creds/password"),
            "{shown}"
        );
        let mut only_sasl = conn();
        only_sasl.tls = None;
        let settings = operator_settings(&only_sasl, "spec.source", &values).unwrap();
        assert_eq!(settings.properties["sasl.password"], "pw-4242");
        assert!(!format!("{settings:?}").contains("pw-4242"));
    }

    #[test]
    fn missing_secret_names_the_reference() {
        let err = operator_settings(&conn(), "spec.source", &SecretValues::new()).unwrap_err();
        assert_eq!(err.role, "spec.source.tls.ca");
        assert_eq!(err.secret, "tls");
        assert!(err.to_string().contains("does not exist"));
    }

    #[test]
    fn pods_get_files_not_values() {
        let p = pod_connection(
            &conn(),
            "source",
            &BTreeMap::from([("fetch.max.bytes".to_string(), "1".to_string())]),
        );
        let args = p.args.join(" ");
        assert!(args.contains("--source-bootstrap k:9093"));
        assert!(
            args.contains("--source-property ssl.ca.location=/etc/kmirror/source/tls-ca/value")
        );
        assert!(args.contains(
            "--source-property ssl.key.location=/etc/kmirror/source/tls-clientKey/value"
        ));
        assert!(args.contains(
            "--source-property-file sasl.password=/etc/kmirror/source/sasl-password/value"
        ));
        assert!(args.contains("--source-property fetch.max.bytes=1"));
        assert!(!args.contains("pw"), "no secret value in arguments");
        assert_eq!(p.volumes.len(), 4);
        assert_eq!(p.volumes[0].name, "source-tls-ca");
        assert_eq!(p.mounts[3].mount_path, "/etc/kmirror/source/sasl-password");
        assert!(p.mounts.iter().all(|m| m.read_only == Some(true)));
    }
}
