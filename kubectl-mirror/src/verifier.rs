//! Running `kmirror-verify` for a mirror: its arguments built from the `ClusterMirror`'s
//! connection blocks, secret material written to private files (never into arguments), and
//! locating the program.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use kmirror_crds::v1alpha1::{IsolationLevel, KafkaConnection, SaslMechanism, SecretKeyRef};

/// The verifier's program name.
pub const VERIFIER: &str = "kmirror-verify";

/// Which cluster of a mirror.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// `spec.source`.
    Source,
    /// `spec.destination`.
    Destination,
}

impl Side {
    /// `source` or `destination`, as in flags and field paths.
    pub fn as_str(self) -> &'static str {
        match self {
            Side::Source => "source",
            Side::Destination => "destination",
        }
    }
}

/// A Secret key whose value must be written to `path` before the verifier runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretFile {
    /// Field that refers to it, e.g. `spec.destination.sasl.password`.
    pub field: String,
    /// The Secret and key.
    pub secret: SecretKeyRef,
    /// Where the value goes.
    pub path: PathBuf,
}

/// Arguments for one side, and the files they refer to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SideArgs {
    /// `--<side>-bootstrap`, `--<side>-property`, `--<side>-property-file` arguments.
    pub args: Vec<String>,
    /// Secret values to write first.
    pub files: Vec<SecretFile>,
}

/// Builds the verifier arguments for one side of a mirror. Plain settings become
/// `--<side>-property k=v`; certificates and keys become files passed as `ssl.*.location`;
/// usernames from Secrets, passwords and client secrets become `--<side>-property-file k=path`.
/// Secret files are placed in `dir`.
pub fn side_args(side: Side, conn: &KafkaConnection, dir: &Path) -> SideArgs {
    let s = side.as_str();
    // Tuning keys only, as the operator takes them; kmirror's settings below win.
    let mut properties: BTreeMap<String, String> = conn
        .properties
        .iter()
        .filter(|(k, _)| {
            kmirror_crds::client_properties::allowed(
                kmirror_crds::client_properties::Client::Connection,
                k,
            )
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let mut property_files: BTreeMap<String, PathBuf> = BTreeMap::new();
    let mut files = Vec::new();
    let mut file = |field: &str, r: &SecretKeyRef, name: &str| -> PathBuf {
        let path = dir.join(format!("{s}-{name}"));
        files.push(SecretFile {
            field: format!("spec.{s}.{field}"),
            secret: r.clone(),
            path: path.clone(),
        });
        path
    };
    properties.insert(
        "security.protocol".into(),
        conn.security_protocol().to_string(),
    );
    if let Some(tls) = &conn.tls {
        if let Some(r) = &tls.ca {
            let p = file("tls.ca", r, "ca.pem");
            properties.insert("ssl.ca.location".into(), p.display().to_string());
        }
        if let Some(r) = &tls.client_cert {
            let p = file("tls.clientCert", r, "client-cert.pem");
            properties.insert("ssl.certificate.location".into(), p.display().to_string());
        }
        if let Some(r) = &tls.client_key {
            let p = file("tls.clientKey", r, "client-key.pem");
            properties.insert("ssl.key.location".into(), p.display().to_string());
        }
        properties.insert(
            "ssl.endpoint.identification.algorithm".into(),
            if tls.verify_hostname { "https" } else { "none" }.into(),
        );
    }
    if let Some(sasl) = &conn.sasl {
        properties.insert(
            "sasl.mechanism".into(),
            sasl.mechanism.as_kafka_str().into(),
        );
        if let Some(u) = &sasl.username {
            properties.insert("sasl.username".into(), u.clone());
        }
        if let Some(r) = &sasl.username_secret {
            let p = file("sasl.usernameSecret", r, "sasl-username");
            property_files.insert("sasl.username".into(), p);
        }
        if let Some(r) = &sasl.password {
            let p = file("sasl.password", r, "sasl-password");
            property_files.insert("sasl.password".into(), p);
        }
        if sasl.mechanism == SaslMechanism::OAuthBearer
            && let Some(o) = &sasl.oauth
        {
            properties.insert("sasl.oauthbearer.method".into(), "oidc".into());
            properties.insert("sasl.oauthbearer.client.id".into(), o.client_id.clone());
            properties.insert(
                "sasl.oauthbearer.token.endpoint.url".into(),
                o.token_endpoint_url.clone(),
            );
            if let Some(scope) = &o.scope {
                properties.insert("sasl.oauthbearer.scope".into(), scope.clone());
            }
            let p = file(
                "sasl.oauth.clientSecret",
                &o.client_secret,
                "oauth-client-secret",
            );
            property_files.insert("sasl.oauthbearer.client.secret".into(), p);
        }
    }
    let mut args = vec![format!("--{s}-bootstrap"), conn.bootstrap_servers.clone()];
    for (k, v) in &properties {
        args.push(format!("--{s}-property"));
        args.push(format!("{k}={v}"));
    }
    for (k, p) in &property_files {
        args.push(format!("--{s}-property-file"));
        args.push(format!("{k}={}", p.display()));
    }
    SideArgs { args, files }
}

/// What to verify: everything but the connections.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicRun {
    /// `namespace/name` of the mirror (the key of its state records).
    pub mirror: String,
    /// The mirror's state topic.
    pub state_topic: String,
    /// How fetchers read the source.
    pub isolation: IsolationLevel,
    /// Source topic.
    pub source_topic: String,
    /// Destination topic.
    pub destination_topic: String,
    /// Partitions (empty: those the verifier finds recorded).
    pub partitions: Vec<i32>,
}

/// The full argument list for one topic.
pub fn arguments(run: &TopicRun, source: &SideArgs, destination: &SideArgs) -> Vec<String> {
    let mut args = vec![
        "--mirror".to_string(),
        run.mirror.clone(),
        "--source-topic".into(),
        run.source_topic.clone(),
        "--destination-topic".into(),
        run.destination_topic.clone(),
    ];
    if !run.partitions.is_empty() {
        let list: Vec<String> = run.partitions.iter().map(ToString::to_string).collect();
        args.push("--partitions".into());
        args.push(list.join(","));
    }
    args.extend(source.args.iter().cloned());
    args.extend(destination.args.iter().cloned());
    args.push("--state-topic".into());
    args.push(run.state_topic.clone());
    if run.isolation == IsolationLevel::ReadUncommitted {
        args.push("--read-uncommitted".into());
    }
    args
}

/// A directory only this user can enter (mode 0700), removed with its content when dropped.
#[derive(Debug)]
pub struct PrivateDir {
    path: PathBuf,
}

impl PrivateDir {
    /// Creates a fresh directory under `parent`.
    pub fn new_in(parent: &Path) -> std::io::Result<PrivateDir> {
        static N: AtomicU32 = AtomicU32::new(0);
        loop {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .subsec_nanos();
            let path = parent.join(format!(
                "kubectl-mirror-{}-{nanos:x}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            match std::fs::DirBuilder::new().mode(0o700).create(&path) {
                Ok(()) => {
                    // The umask may have narrowed the mode; make sure it is exactly 0700.
                    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o700))?;
                    return Ok(PrivateDir { path });
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Creates a fresh directory under the system's temporary directory.
    pub fn new() -> std::io::Result<PrivateDir> {
        PrivateDir::new_in(&std::env::temp_dir())
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for PrivateDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// Writes `bytes` to a new file readable and writable by this user only (mode 0600).
pub fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}

/// Finds the verifier: next to `own_exe` first, then in the directories of `path_var`.
/// The error says where it looked.
pub fn find(own_exe: Option<&Path>, path_var: Option<&OsStr>) -> Result<PathBuf, String> {
    let is_program = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    let beside = own_exe.and_then(Path::parent).map(|d| d.join(VERIFIER));
    if let Some(p) = &beside
        && is_program(p)
    {
        return Ok(p.clone());
    }
    if let Some(var) = path_var {
        for dir in std::env::split_paths(var) {
            let p = dir.join(VERIFIER);
            if is_program(&p) {
                return Ok(p);
            }
        }
    }
    let beside = beside
        .map(|p| format!(" (looked for {} and in PATH)", p.display()))
        .unwrap_or_else(|| " (looked in PATH)".to_string());
    Err(format!(
        "{VERIFIER} not found{beside}: install it next to kubectl-mirror or in a directory of \
         PATH; it is part of every kmirror release"
    ))
}

/// The message of a finished verifier run that failed with `code` (2: it reported an error).
pub fn failure_message(code: Option<i32>, stderr: &str) -> String {
    let reported = stderr
        .lines()
        .rev()
        .find_map(|l| l.trim().strip_prefix(&format!("{VERIFIER}: ")))
        .map(str::to_string);
    let tail = || {
        let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
        lines[lines.len().saturating_sub(5)..].join("\n")
    };
    match (code, reported) {
        (_, Some(message)) => message,
        (Some(c), None) => format!("{VERIFIER} exited with code {c}: {}", tail()),
        (None, None) => format!("{VERIFIER} was killed by a signal: {}", tail()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kmirror_crds::v1alpha1::{OAuthConfig, SaslConfig, TlsConfig};

    fn r(name: &str, key: &str) -> SecretKeyRef {
        SecretKeyRef {
            name: name.into(),
            key: key.into(),
        }
    }

    fn full_connection() -> KafkaConnection {
        KafkaConnection {
            bootstrap_servers: "b1:9093,b2:9093".into(),
            cluster_id: None,
            tls: Some(TlsConfig {
                ca: Some(r("tls", "ca.crt")),
                client_cert: Some(r("tls", "tls.crt")),
                client_key: Some(r("tls", "tls.key")),
                verify_hostname: false,
            }),
            sasl: Some(SaslConfig {
                mechanism: SaslMechanism::ScramSha512,
                username: None,
                username_secret: Some(r("creds", "user")),
                password: Some(r("creds", "password")),
                oauth: None,
            }),
            properties: BTreeMap::from([("client.id".into(), "verify".into())]),
            allow_insecure: true,
        }
    }

    fn pairs(args: &[String], flag: &str) -> Vec<String> {
        args.windows(2)
            .filter(|w| w[0] == flag)
            .map(|w| w[1].clone())
            .collect()
    }

    #[test]
    fn tls_and_sasl_become_files_and_properties() {
        let dir = Path::new("/private");
        let a = side_args(Side::Source, &full_connection(), dir);
        assert_eq!(a.args[..2], ["--source-bootstrap", "b1:9093,b2:9093"]);
        assert_eq!(
            pairs(&a.args, "--source-property"),
            [
                "client.id=verify",
                "sasl.mechanism=SCRAM-SHA-512",
                "security.protocol=SASL_SSL",
                "ssl.ca.location=/private/source-ca.pem",
                "ssl.certificate.location=/private/source-client-cert.pem",
                "ssl.endpoint.identification.algorithm=none",
                "ssl.key.location=/private/source-client-key.pem",
            ]
        );
        assert_eq!(
            pairs(&a.args, "--source-property-file"),
            [
                "sasl.password=/private/source-sasl-password",
                "sasl.username=/private/source-sasl-username",
            ]
        );
        let fields: Vec<&str> = a.files.iter().map(|f| f.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "spec.source.tls.ca",
                "spec.source.tls.clientCert",
                "spec.source.tls.clientKey",
                "spec.source.sasl.usernameSecret",
                "spec.source.sasl.password",
            ]
        );
        assert!(a.files.iter().all(|f| f.path.starts_with(dir)));
    }

    #[test]
    fn plaintext_and_inline_username() {
        let plain = KafkaConnection {
            bootstrap_servers: "a:9092".into(),
            ..Default::default()
        };
        let a = side_args(Side::Destination, &plain, Path::new("/d"));
        assert_eq!(
            a.args,
            [
                "--destination-bootstrap",
                "a:9092",
                "--destination-property",
                "security.protocol=PLAINTEXT"
            ]
        );
        assert!(a.files.is_empty());
        let sasl = KafkaConnection {
            sasl: Some(SaslConfig {
                mechanism: SaslMechanism::Plain,
                username: Some("mirror".into()),
                username_secret: None,
                password: Some(r("creds", "password")),
                oauth: None,
            }),
            ..plain
        };
        let a = side_args(Side::Destination, &sasl, Path::new("/d"));
        assert!(a.args.contains(&"sasl.username=mirror".to_string()));
        assert!(
            a.args
                .contains(&"security.protocol=SASL_PLAINTEXT".to_string())
        );
        assert!(
            a.args
                .contains(&"sasl.password=/d/destination-sasl-password".to_string())
        );
    }

    #[test]
    fn oauth_client_secret_is_a_file() {
        let conn = KafkaConnection {
            bootstrap_servers: "a:9092".into(),
            tls: Some(TlsConfig {
                verify_hostname: true,
                ..Default::default()
            }),
            sasl: Some(SaslConfig {
                mechanism: SaslMechanism::OAuthBearer,
                username: None,
                username_secret: None,
                password: None,
                oauth: Some(OAuthConfig {
                    token_endpoint_url: "https://idp/token".into(),
                    client_id: "kmirror".into(),
                    client_secret: r("oidc", "secret"),
                    scope: Some("kafka".into()),
                }),
            }),
            ..Default::default()
        };
        let a = side_args(Side::Source, &conn, Path::new("/d"));
        for p in [
            "sasl.oauthbearer.method=oidc",
            "sasl.oauthbearer.client.id=kmirror",
            "sasl.oauthbearer.token.endpoint.url=https://idp/token",
            "sasl.oauthbearer.scope=kafka",
            "ssl.endpoint.identification.algorithm=https",
            "security.protocol=SASL_SSL",
        ] {
            assert!(a.args.contains(&p.to_string()), "{p} in {:?}", a.args);
        }
        assert_eq!(
            pairs(&a.args, "--source-property-file"),
            ["sasl.oauthbearer.client.secret=/d/source-oauth-client-secret"]
        );
    }

    #[test]
    fn secret_values_never_reach_the_arguments() {
        let dir = PrivateDir::new().unwrap();
        let mode = std::fs::metadata(dir.path()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        let conn = full_connection();
        let source = side_args(Side::Source, &conn, dir.path());
        let destination = side_args(Side::Destination, &conn, dir.path());
        let values: BTreeMap<(&str, &str), &str> = BTreeMap::from([
            (("tls", "ca.crt"), "CA-PEM-VALUE"),
            (("tls", "tls.crt"), "CERT-PEM-VALUE"),
            (("tls", "tls.key"), "KEY-PEM-VALUE"),
            (("creds", "user"), "USER-VALUE"),
            (("creds", "password"), "PASSWORD-VALUE"),
        ]);
        for f in source.files.iter().chain(&destination.files) {
            let v = values[&(f.secret.name.as_str(), f.secret.key.as_str())];
            write_private(&f.path, v.as_bytes()).unwrap();
            let m = std::fs::metadata(&f.path).unwrap().permissions().mode();
            assert_eq!(m & 0o777, 0o600, "{}", f.path.display());
            assert_eq!(std::fs::read_to_string(&f.path).unwrap(), v);
        }
        let run = TopicRun {
            mirror: "ns/dr".into(),
            state_topic: "__kmirror_state".into(),
            isolation: IsolationLevel::ReadUncommitted,
            source_topic: "orders".into(),
            destination_topic: "orders-copy".into(),
            partitions: vec![0, 2],
        };
        let args = arguments(&run, &source, &destination);
        let joined = args.join(" ");
        for v in values.values() {
            assert!(!joined.contains(v), "{v} leaked into {joined}");
        }
        assert_eq!(
            args[..8],
            [
                "--mirror",
                "ns/dr",
                "--source-topic",
                "orders",
                "--destination-topic",
                "orders-copy",
                "--partitions",
                "0,2"
            ]
        );
        assert!(joined.ends_with("--state-topic __kmirror_state --read-uncommitted"));
        assert!(joined.contains("--destination-bootstrap b1:9093,b2:9093"));
        let path = dir.path().to_path_buf();
        drop(dir);
        assert!(!path.exists(), "the private directory is removed");
    }

    #[test]
    fn finds_the_verifier_beside_then_in_path() {
        let dir = PrivateDir::new().unwrap();
        let beside = dir.path().join("bin");
        let other = dir.path().join("other");
        std::fs::create_dir_all(&beside).unwrap();
        std::fs::create_dir_all(&other).unwrap();
        let exe = beside.join("kubectl-mirror");
        let err = find(Some(&exe), Some(other.as_os_str())).unwrap_err();
        assert!(err.contains("kmirror-verify not found"), "{err}");
        assert!(
            err.contains(&beside.join(VERIFIER).display().to_string()),
            "{err}"
        );
        let in_path = other.join(VERIFIER);
        std::fs::write(&in_path, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&in_path, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(find(Some(&exe), Some(other.as_os_str())).unwrap(), in_path);
        let next_to = beside.join(VERIFIER);
        std::fs::write(&next_to, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&next_to, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(find(Some(&exe), Some(other.as_os_str())).unwrap(), next_to);
    }

    #[test]
    fn failure_messages() {
        assert_eq!(
            failure_message(Some(2), "log line\nkmirror-verify: no state recorded\n"),
            "no state recorded"
        );
        assert_eq!(
            failure_message(Some(3), "a\nb\n"),
            "kmirror-verify exited with code 3: a\nb"
        );
        assert!(failure_message(None, "").contains("signal"));
    }
}
