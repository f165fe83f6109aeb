//! Per-namespace command lookup: a namespace annotated `kmirror.io/test-bin-path` (a
//! colon-separated list of directories) has its pods' container commands looked up in those
//! directories before the agent's `--bin-path`. Several checkouts of the workspace, each with its
//! own cargo target directory, can so share one node agent: each test namespace names the
//! binaries it was built with. Lookups are cached per namespace for a few seconds.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use kube::{Api, Client};

/// The namespace annotation naming directories searched first for container commands.
pub const ANNOTATION: &str = "kmirror.io/test-bin-path";

/// How long a namespace's directories are reused before the namespace is read again.
pub const CACHE_TTL: Duration = Duration::from_secs(5);

/// The directories of an annotation value: colon-separated, empty entries skipped, relative
/// entries ignored (they would depend on the agent's working directory).
pub fn parse(value: &str) -> Vec<PathBuf> {
    value
        .split(':')
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .filter(|d| d.is_absolute())
        .collect()
}

/// The search order for a pod: the namespace's directories, then the agent's.
pub fn search_dirs(namespace_dirs: &[PathBuf], agent_dirs: &[PathBuf]) -> Vec<PathBuf> {
    namespace_dirs
        .iter()
        .chain(agent_dirs.iter())
        .cloned()
        .collect()
}

/// A per-namespace cache of the annotation.
#[derive(Debug)]
pub struct NamespaceBinPaths {
    ttl: Duration,
    cache: Mutex<HashMap<String, (Instant, Vec<PathBuf>)>>,
}

impl Default for NamespaceBinPaths {
    fn default() -> Self {
        NamespaceBinPaths::new(CACHE_TTL)
    }
}

impl NamespaceBinPaths {
    /// A cache whose entries live `ttl`.
    pub fn new(ttl: Duration) -> NamespaceBinPaths {
        NamespaceBinPaths {
            ttl,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// The cached directories of `namespace`, when read less than `ttl` before `now`.
    pub fn cached(&self, namespace: &str, now: Instant) -> Option<Vec<PathBuf>> {
        let cache = self.cache.lock().expect("bin path cache lock");
        cache
            .get(namespace)
            .filter(|(at, _)| now.saturating_duration_since(*at) < self.ttl)
            .map(|(_, dirs)| dirs.clone())
    }

    /// Remembers the directories of `namespace` as read at `now`.
    pub fn remember(&self, namespace: &str, dirs: Vec<PathBuf>, now: Instant) {
        let mut cache = self.cache.lock().expect("bin path cache lock");
        cache.retain(|_, (at, _)| now.saturating_duration_since(*at) < self.ttl);
        cache.insert(namespace.to_string(), (now, dirs));
    }

    /// The directories `namespace` names (empty without the annotation). A namespace that
    /// cannot be read counts as one without the annotation, and is not cached.
    pub async fn dirs(&self, client: &Client, namespace: &str) -> Vec<PathBuf> {
        if let Some(dirs) = self.cached(namespace, Instant::now()) {
            return dirs;
        }
        let api: Api<Namespace> = Api::all(client.clone());
        match api.get_opt(namespace).await {
            Ok(found) => {
                let dirs = found
                    .and_then(|ns| ns.metadata.annotations)
                    .and_then(|a| a.get(ANNOTATION).map(|v| parse(v)))
                    .unwrap_or_default();
                self.remember(namespace, dirs.clone(), Instant::now());
                dirs
            }
            Err(e) => {
                tracing::warn!(%namespace, "cannot read the namespace's {ANNOTATION}: {e}");
                Vec::new()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resolve::resolve;
    use std::os::unix::fs::PermissionsExt;
    use std::path::Path;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("kmirror-nsbin-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn exe(dir: &Path, name: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    #[test]
    fn parses_colon_separated_absolute_dirs() {
        assert_eq!(
            parse("/a/debug: /b ::relative:/c/"),
            vec![
                PathBuf::from("/a/debug"),
                PathBuf::from("/b"),
                PathBuf::from("/c/")
            ]
        );
        assert!(parse("").is_empty());
        assert!(parse(" : ").is_empty());
    }

    #[test]
    fn namespace_dirs_win_and_agent_dirs_remain_the_fallback() {
        let worktree = scratch("worktree");
        let main = scratch("main");
        let ours = exe(&worktree, "kmirror-fetcher");
        let theirs = exe(&main, "kmirror-fetcher");
        let only_main = exe(&main, "kmirror-operator");
        let agent = vec![main.clone()];
        let annotated = search_dirs(&parse(&worktree.display().to_string()), &agent);
        assert_eq!(
            resolve("/usr/local/bin/kmirror-fetcher", &annotated, "").unwrap(),
            ours
        );
        // Not built in the annotated directory: the agent's directories still serve.
        assert_eq!(
            resolve("kmirror-operator", &annotated, "").unwrap(),
            only_main
        );
        // Without the annotation: the agent's directories only.
        let plain = search_dirs(&[], &agent);
        assert_eq!(resolve("kmirror-fetcher", &plain, "").unwrap(), theirs);
        std::fs::remove_dir_all(worktree).unwrap();
        std::fs::remove_dir_all(main).unwrap();
    }

    #[test]
    fn cache_entries_expire_after_the_ttl() {
        let cache = NamespaceBinPaths::new(Duration::from_secs(5));
        let t0 = Instant::now();
        assert_eq!(cache.cached("ns", t0), None);
        cache.remember("ns", vec![PathBuf::from("/x")], t0);
        assert_eq!(
            cache.cached("ns", t0 + Duration::from_secs(4)),
            Some(vec![PathBuf::from("/x")])
        );
        assert_eq!(cache.cached("ns", t0 + Duration::from_secs(5)), None);
        // A namespace without the annotation is cached too (as no directories).
        cache.remember("plain", Vec::new(), t0);
        assert_eq!(cache.cached("plain", t0), Some(Vec::new()));
        // Expired entries are dropped when another is remembered.
        cache.remember("other", Vec::new(), t0 + Duration::from_secs(10));
        assert_eq!(cache.cache.lock().unwrap().len(), 1);
    }
}
