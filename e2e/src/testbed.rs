//! Locating (or starting) the test bed and reading its environment.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// A running test bed: the variables `e2e/testbed.sh env` exports.
#[derive(Debug, Clone)]
pub struct Testbed {
    vars: HashMap<String, String>,
}

static BED: OnceLock<Testbed> = OnceLock::new();

/// The repository root (the workspace that holds `e2e/testbed.sh`).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("e2e crate sits inside the repository")
        .to_path_buf()
}

/// A `cargo` command for building the workspace from a test: without the variables cargo sets
/// for the crate under test. ring's build script reruns when `CARGO_MANIFEST_DIR` changes, so
/// with them every crate above it would be compiled again and the binaries that bed pods and
/// the node agent run replaced mid-run.
pub fn cargo() -> Command {
    let mut cmd = Command::new(env!("CARGO"));
    for (name, _) in std::env::vars_os() {
        let Some(name) = name.to_str() else { continue };
        let per_crate = ["CARGO_MANIFEST_", "CARGO_PKG_", "CARGO_BIN_"]
            .iter()
            .any(|p| name.starts_with(p))
            || matches!(
                name,
                "CARGO_CRATE_NAME"
                    | "CARGO_PRIMARY_PACKAGE"
                    | "CARGO_TARGET_TMPDIR"
                    | "CARGO_RUSTC_CURRENT_DIR"
            );
        if per_crate {
            cmd.env_remove(name);
        }
    }
    cmd
}

/// The test bed script, `e2e/testbed.sh`.
pub fn script() -> PathBuf {
    repo_root().join("e2e/testbed.sh")
}

/// Parses `export NAME='value'` lines as printed by `testbed.sh env`.
pub fn parse_exports(text: &str) -> HashMap<String, String> {
    text.lines()
        .filter_map(|line| line.trim().strip_prefix("export "))
        .filter_map(|assignment| assignment.split_once('='))
        .map(|(name, value)| {
            let value = value
                .strip_prefix('\'')
                .and_then(|v| v.strip_suffix('\''))
                .unwrap_or(value);
            (name.to_string(), value.to_string())
        })
        .collect()
}

fn run_script(args: &[&str]) -> String {
    let out = Command::new(script())
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", script().display()));
    assert!(
        out.status.success(),
        "e2e/testbed.sh {} failed:\n{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

impl Testbed {
    /// The shared bed for this test process. `testbed.sh up` is idempotent, so this reuses
    /// whatever runs and starts what does not. Set `KMIRROR_TESTBED_UP_ARGS` (e.g. `--compat`)
    /// to pass options to `up`.
    pub fn get() -> &'static Testbed {
        BED.get_or_init(|| Testbed::start(&[]))
    }

    /// Runs `testbed.sh up` with `args` (plus `KMIRROR_TESTBED_UP_ARGS`) and reads the bed's
    /// environment afresh.
    pub fn start(args: &[&str]) -> Testbed {
        let extra = std::env::var("KMIRROR_TESTBED_UP_ARGS").unwrap_or_default();
        let mut all = vec!["up"];
        all.extend(extra.split_whitespace());
        all.extend_from_slice(args);
        let status = Command::new(script())
            .args(&all)
            .status()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", script().display()));
        assert!(status.success(), "e2e/testbed.sh {} failed", all.join(" "));
        Testbed {
            vars: parse_exports(&run_script(&["env"])),
        }
    }

    /// A variable of the bed's environment; panics with a clear message when it is missing.
    pub fn var(&self, name: &str) -> &str {
        self.vars
            .get(name)
            .unwrap_or_else(|| panic!("the test bed exports no {name}; is that part running?"))
    }

    /// A variable, if the bed exports it (e.g. optional compatibility clusters).
    pub fn opt_var(&self, name: &str) -> Option<&str> {
        self.vars.get(name).map(String::as_str)
    }

    /// Source cluster, PLAINTEXT listener.
    pub fn source_bootstrap(&self) -> &str {
        self.var("KMIRROR_SOURCE_BOOTSTRAP")
    }

    /// Destination cluster, SASL_PLAINTEXT listener.
    pub fn dest_bootstrap(&self) -> &str {
        self.var("KMIRROR_DEST_BOOTSTRAP")
    }

    /// Runs a Kafka tool class from the bed's Kafka jars and returns its stdout.
    pub fn kafka_tool(&self, class: &str, args: &[&str]) -> anyhow::Result<String> {
        let out = Command::new(self.var("KMIRROR_KAFKA_RUN"))
            .arg(class)
            .args(args)
            .output()?;
        anyhow::ensure!(
            out.status.success(),
            "{class} {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// A Kubernetes client for the bed's control plane, as the admin user.
    pub async fn kube_client(&self) -> anyhow::Result<kube::Client> {
        let kubeconfig = kube::config::Kubeconfig::read_from(self.var("KUBECONFIG"))?;
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
        Ok(kube::Client::try_from(config)?)
    }
}

#[cfg(test)]
mod tests {
    use super::{cargo, parse_exports, repo_root};

    /// Built-unit freshness from `cargo build --message-format=json` output: (fresh, compiled).
    fn build(mut cmd: std::process::Command) -> (usize, Vec<String>) {
        let out = cmd
            .args([
                "build",
                "--workspace",
                "--bins",
                "--tests",
                "--message-format=json",
            ])
            .current_dir(repo_root())
            .stderr(std::process::Stdio::null())
            .output()
            .expect("run cargo build");
        assert!(out.status.success(), "cargo build failed");
        let (mut fresh, mut compiled) = (0, Vec::new());
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let Ok(msg) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            if msg["reason"] != "compiler-artifact" {
                continue;
            }
            if msg["fresh"] == true {
                fresh += 1;
            } else {
                compiled.push(msg["package_id"].as_str().unwrap_or("?").to_string());
            }
        }
        (fresh, compiled)
    }

    /// The build `make test` does before its tests (its shell has none of the variables cargo
    /// sets for a test), then the build a test helper does: the second must compile nothing,
    /// or the binaries that bed pods and the node agent run are replaced mid-run.
    #[test]
    fn a_build_from_a_test_reuses_the_build_before_the_tests() {
        // Every CARGO_* variable but cargo's own configuration (set by a user or CI).
        let config = [
            "CARGO_HOME",
            "CARGO_TARGET_DIR",
            "CARGO_INCREMENTAL",
            "CARGO_BUILD_",
            "CARGO_TERM_",
            "CARGO_PROFILE_",
            "CARGO_NET_",
            "CARGO_HTTP_",
            "CARGO_REGISTR",
            "CARGO_ALIAS_",
            "CARGO_UNSTABLE_",
            "CARGO_LOG",
            "CARGO_CACHE_",
        ];
        let mut outer = std::process::Command::new(env!("CARGO"));
        for (name, _) in std::env::vars_os() {
            let Some(n) = name.to_str() else { continue };
            if n.starts_with("CARGO_") && !config.iter().any(|c| n.starts_with(c)) {
                outer.env_remove(n);
            }
        }
        build(outer);
        let (fresh, compiled) = build(cargo());
        assert!(fresh > 0, "no artifacts reported");
        assert!(compiled.is_empty(), "compiled again: {compiled:?}");
    }

    #[test]
    fn parses_quoted_exports() {
        let vars = parse_exports("export A='1'\nnoise\nexport B='x y'\nexport C=plain\n");
        assert_eq!(vars["A"], "1");
        assert_eq!(vars["B"], "x y");
        assert_eq!(vars["C"], "plain");
        assert_eq!(vars.len(), 3);
    }
}
