//! A container's environment: base variables, `envFrom`, `env` with `valueFrom`, and `$(VAR)`
//! expansion in values, command and args, in the order and with the precedence of a kubelet.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{Container, Pod};
use thiserror::Error;

use crate::downward::{self, DownwardError, PodFacts};
use crate::sources::Sources;

/// Why a container's environment cannot be built (`CreateContainerConfigError`).
#[derive(Debug, Error, PartialEq, Eq)]
pub enum EnvError {
    /// A referenced Secret does not exist.
    #[error("secret \"{0}\" not found")]
    SecretNotFound(String),
    /// A referenced ConfigMap does not exist.
    #[error("configmap \"{0}\" not found")]
    ConfigMapNotFound(String),
    /// A Secret lacks a referenced key.
    #[error("couldn't find key {key} in Secret {name}")]
    SecretKeyNotFound {
        /// Secret name.
        name: String,
        /// Missing key.
        key: String,
    },
    /// A ConfigMap lacks a referenced key.
    #[error("couldn't find key {key} in ConfigMap {name}")]
    ConfigMapKeyNotFound {
        /// ConfigMap name.
        name: String,
        /// Missing key.
        key: String,
    },
    /// A downward API reference cannot be resolved.
    #[error("env var {name}: {source}")]
    Downward {
        /// The variable.
        name: String,
        /// What went wrong.
        source: DownwardError,
    },
}

/// Variables in insertion order; setting an existing name replaces its value in place.
#[derive(Debug, Default, Clone)]
pub struct EnvList {
    vars: Vec<(String, String)>,
    index: HashMap<String, usize>,
}

impl EnvList {
    /// Sets `name` to `value`.
    pub fn set(&mut self, name: &str, value: String) {
        match self.index.get(name) {
            Some(&i) => self.vars[i].1 = value,
            None => {
                self.index.insert(name.to_string(), self.vars.len());
                self.vars.push((name.to_string(), value));
            }
        }
    }

    /// The value of `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.index.get(name).map(|&i| self.vars[i].1.as_str())
    }

    /// The variables, in order.
    pub fn into_vec(self) -> Vec<(String, String)> {
        self.vars
    }
}

/// Expands `$(NAME)` references with `lookup`; `$$` is a literal `$`, unknown references stay
/// as written (the kubelet's rules).
pub fn expand<'a>(text: &str, lookup: impl Fn(&str) -> Option<&'a str>) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(inner) = after.strip_prefix('(')
            && let Some(close) = inner.find(')')
        {
            let name = &inner[..close];
            match lookup(name) {
                Some(value) => out.push_str(value),
                None => {
                    out.push_str("$(");
                    out.push_str(name);
                    out.push(')');
                }
            }
            rest = &inner[close + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

fn lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The environment of `container`: `base` (PATH, HOSTNAME, KUBERNETES_SERVICE_*...), then
/// every `envFrom` source in order (keys with `=` are skipped), then `env` entries, each value
/// expanded against what is defined before it. Later definitions win.
pub fn container_env(
    pod: &Pod,
    container: &Container,
    base: Vec<(String, String)>,
    facts: &PodFacts,
    sources: &Sources,
) -> Result<Vec<(String, String)>, EnvError> {
    let mut env = EnvList::default();
    for (name, value) in base {
        env.set(&name, value);
    }
    for from in container.env_from.iter().flatten() {
        let prefix = from.prefix.as_deref().unwrap_or("");
        let (data, optional) = if let Some(s) = &from.secret_ref {
            match sources.secrets.get(&s.name).and_then(Option::as_ref) {
                Some(data) => (Some(data), true),
                None => (None, s.optional.unwrap_or(false)),
            }
        } else if let Some(c) = &from.config_map_ref {
            match sources.config_maps.get(&c.name).and_then(Option::as_ref) {
                Some(data) => (Some(data), true),
                None => (None, c.optional.unwrap_or(false)),
            }
        } else {
            continue;
        };
        match data {
            Some(data) => {
                for (key, value) in data.iter().filter(|(k, _)| !k.contains('=')) {
                    env.set(&format!("{prefix}{key}"), lossy(value));
                }
            }
            None if optional => {}
            None => {
                return Err(match (&from.secret_ref, &from.config_map_ref) {
                    (Some(s), _) => EnvError::SecretNotFound(s.name.clone()),
                    (_, Some(c)) => EnvError::ConfigMapNotFound(c.name.clone()),
                    _ => unreachable!("checked above"),
                });
            }
        }
    }
    for var in container.env.iter().flatten() {
        let value = match &var.value_from {
            None => {
                let raw = var.value.as_deref().unwrap_or("");
                Some(expand(raw, |n| env.get(n)))
            }
            Some(from) => value_from(pod, container, &var.name, from, facts, sources)?,
        };
        if let Some(value) = value {
            env.set(&var.name, value);
        }
    }
    Ok(env.into_vec())
}

/// One `valueFrom`; `None` when an optional source is missing (the variable is not set).
fn value_from(
    pod: &Pod,
    container: &Container,
    name: &str,
    from: &k8s_openapi::api::core::v1::EnvVarSource,
    facts: &PodFacts,
    sources: &Sources,
) -> Result<Option<String>, EnvError> {
    let downward_err = |source| EnvError::Downward {
        name: name.to_string(),
        source,
    };
    if let Some(field) = &from.field_ref {
        return downward::field_value(pod, facts, &field.field_path)
            .map(Some)
            .map_err(downward_err);
    }
    if let Some(res) = &from.resource_field_ref {
        let target = res.container_name.as_deref().unwrap_or(&container.name);
        let target = if target.is_empty() {
            &container.name
        } else {
            target
        };
        return downward::resource_value(pod, target, &res.resource, res.divisor.as_ref(), facts)
            .map(Some)
            .map_err(downward_err);
    }
    if let Some(key_ref) = &from.secret_key_ref {
        let optional = key_ref.optional.unwrap_or(false);
        return match sources.secrets.get(&key_ref.name).and_then(Option::as_ref) {
            None if optional => Ok(None),
            None => Err(EnvError::SecretNotFound(key_ref.name.clone())),
            Some(data) => match data.get(&key_ref.key) {
                Some(v) => Ok(Some(lossy(v))),
                None if optional => Ok(None),
                None => Err(EnvError::SecretKeyNotFound {
                    name: key_ref.name.clone(),
                    key: key_ref.key.clone(),
                }),
            },
        };
    }
    if let Some(key_ref) = &from.config_map_key_ref {
        let optional = key_ref.optional.unwrap_or(false);
        return match sources
            .config_maps
            .get(&key_ref.name)
            .and_then(Option::as_ref)
        {
            None if optional => Ok(None),
            None => Err(EnvError::ConfigMapNotFound(key_ref.name.clone())),
            Some(data) => match data.get(&key_ref.key) {
                Some(v) => Ok(Some(lossy(v))),
                None if optional => Ok(None),
                None => Err(EnvError::ConfigMapKeyNotFound {
                    name: key_ref.name.clone(),
                    key: key_ref.key.clone(),
                }),
            },
        };
    }
    Ok(None)
}

/// `command` and `args` with `$(VAR)` references expanded against the final environment.
pub fn expand_command(container: &Container, env: &[(String, String)]) -> Vec<String> {
    let lookup = |n: &str| {
        env.iter()
            .rev()
            .find(|(k, _)| k == n)
            .map(|(_, v)| v.as_str())
    };
    container
        .command
        .iter()
        .flatten()
        .chain(container.args.iter().flatten())
        .map(|s| expand(s, lookup))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::downward::NodeResources;
    use crate::sources::ObjectData;

    fn facts() -> PodFacts {
        PodFacts {
            pod_ip: "127.0.0.11".into(),
            host_ip: "127.0.0.1".into(),
            node_name: "kmirror-node".into(),
            allocatable: NodeResources {
                cpu: 2.0,
                memory: 1e9,
                ephemeral_storage: 1e10,
            },
        }
    }

    fn data(pairs: &[(&str, &str)]) -> Option<ObjectData> {
        Some(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
                .collect(),
        )
    }

    fn sources() -> Sources {
        let mut s = Sources::default();
        s.secrets.insert(
            "creds".into(),
            data(&[("user", "alice"), ("pass", "s3cr3t")]),
        );
        s.secrets.insert("missing".into(), None);
        s.config_maps.insert(
            "settings".into(),
            data(&[("MODE", "fast"), ("bad=key", "x")]),
        );
        s
    }

    fn pod(container: serde_json::Value) -> (Pod, Container) {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "ns", "uid": "u-9"},
            "spec": {"serviceAccountName": "default", "containers": [container]}
        }))
        .unwrap();
        let c = pod.spec.as_ref().unwrap().containers[0].clone();
        (pod, c)
    }

    #[test]
    fn expansion_follows_kubelet_rules() {
        let vars = [("A", "1"), ("B", "two")];
        let lookup = |n: &str| vars.iter().find(|(k, _)| *k == n).map(|(_, v)| *v);
        assert_eq!(expand("x$(A)y$(B)", lookup), "x1ytwo");
        assert_eq!(expand("$(MISSING)", lookup), "$(MISSING)");
        assert_eq!(expand("$$(A)", lookup), "$(A)");
        assert_eq!(expand("cost $5 $(A", lookup), "cost $5 $(A");
        assert_eq!(expand("$", lookup), "$");
    }

    #[test]
    fn builds_env_in_kubelet_order() {
        let (p, c) = pod(serde_json::json!({
            "name": "main",
            "envFrom": [{"configMapRef": {"name": "settings"}},
                        {"secretRef": {"name": "creds"}, "prefix": "DB_"}],
            "env": [
                {"name": "MODE", "value": "slow"},
                {"name": "USER", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "user"}}},
                {"name": "CFG", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "MODE"}}},
                {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                {"name": "URL", "value": "http://$(IP):80/$(POD)"},
                {"name": "OPT", "valueFrom": {"secretKeyRef": {"name": "missing", "key": "k", "optional": true}}}
            ]
        }));
        let base = vec![("PATH".to_string(), "/bin".to_string())];
        let env = container_env(&p, &c, base, &facts(), &sources()).unwrap();
        let names: Vec<&str> = env.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            names,
            [
                "PATH", "MODE", "DB_pass", "DB_user", "USER", "CFG", "POD", "IP", "URL"
            ]
        );
        let get = |n: &str| env.iter().find(|(k, _)| k == n).unwrap().1.clone();
        assert_eq!(get("MODE"), "slow");
        assert_eq!(get("DB_user"), "alice");
        assert_eq!(get("USER"), "alice");
        assert_eq!(get("CFG"), "fast");
        assert_eq!(get("URL"), "http://127.0.0.11:80/web");
    }

    #[test]
    fn missing_required_sources_are_config_errors() {
        let (p, c) = pod(serde_json::json!({"name": "main", "env": [
            {"name": "X", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "nope"}}}
        ]}));
        assert_eq!(
            container_env(&p, &c, vec![], &facts(), &sources()),
            Err(EnvError::SecretKeyNotFound {
                name: "creds".into(),
                key: "nope".into()
            })
        );
        let (p, c) = pod(serde_json::json!({"name": "main",
            "envFrom": [{"secretRef": {"name": "missing"}}]}));
        assert_eq!(
            container_env(&p, &c, vec![], &facts(), &sources()),
            Err(EnvError::SecretNotFound("missing".into()))
        );
        let (p, c) = pod(serde_json::json!({"name": "main",
            "envFrom": [{"secretRef": {"name": "missing", "optional": true}}]}));
        assert!(container_env(&p, &c, vec![], &facts(), &sources()).is_ok());
    }

    #[test]
    fn command_and_args_are_expanded() {
        let (_, c) = pod(serde_json::json!({"name": "main",
            "command": ["/bin/sh", "-c"], "args": ["echo $(GREETING) $$(GREETING)"]}));
        let env = vec![("GREETING".to_string(), "hi".to_string())];
        assert_eq!(
            expand_command(&c, &env),
            ["/bin/sh", "-c", "echo hi $(GREETING)"]
        );
    }
}
