//! What the operator's installer allows a ClusterMirror to ask of fetcher pods: the images they
//! run, the service accounts they run as, and of the pod template the priority classes (which
//! may preempt others' pods) and the taints they tolerate (which keep nodes for others).
//! Creating a ClusterMirror must not be a way to run any image, or any workload identity, in its
//! namespace, nor to push other workloads aside.

use kmirror_crds::v1alpha1::ClusterMirrorSpec;
use kmirror_crds::validate::Invalid;

/// The allow-lists (operator flags; the chart's values).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetcherPolicy {
    /// Allowed image prefixes (`registry/repository:` or a whole reference).
    pub images: Vec<String>,
    /// Allowed service account names of fetcher pods (`default`: the namespace's default).
    pub service_accounts: Vec<String>,
    /// Priority classes `spec.fetcher.template.priorityClassName` may name (empty: none).
    pub priority_classes: Vec<String>,
    /// Taint keys `spec.fetcher.template.tolerations` may tolerate; empty: any key but the
    /// control plane's (`node-role.kubernetes.io/*`); `*`: any toleration, a keyless one too.
    pub toleration_keys: Vec<String>,
}

/// Taint keys refused by default: tolerating them puts fetchers on control-plane nodes.
const CONTROL_PLANE_TAINTS: &str = "node-role.kubernetes.io/";

fn list(s: &str) -> Vec<String> {
    s.split(',')
        .map(str::trim)
        .filter(|x| !x.is_empty())
        .map(String::from)
        .collect()
}

impl FetcherPolicy {
    /// The policy from comma-separated lists; an empty image list allows the operator's own
    /// fetcher image only, an empty service account list the namespace's `default` only.
    pub fn new(images: &str, service_accounts: &str, default_image: &str) -> FetcherPolicy {
        let mut images = list(images);
        if images.is_empty() {
            images.push(default_image.to_string());
        }
        let mut service_accounts = list(service_accounts);
        if service_accounts.is_empty() {
            service_accounts.push("default".into());
        }
        FetcherPolicy {
            images,
            service_accounts,
            priority_classes: Vec::new(),
            toleration_keys: Vec::new(),
        }
    }

    /// The policy with the template's bounds from comma-separated lists: the priority classes
    /// fetcher pods may use and the taint keys they may tolerate.
    pub fn with_template_bounds(
        mut self,
        priority_classes: &str,
        toleration_keys: &str,
    ) -> FetcherPolicy {
        self.priority_classes = list(priority_classes);
        self.toleration_keys = list(toleration_keys);
        self
    }

    /// Whether a toleration of `key` (`None`: every taint) is allowed.
    fn toleration_allowed(&self, key: Option<&str>) -> bool {
        if self.toleration_keys.iter().any(|k| k == "*") {
            return true;
        }
        match key.filter(|k| !k.is_empty()) {
            None => false,
            Some(key) if self.toleration_keys.is_empty() => !key.starts_with(CONTROL_PLANE_TAINTS),
            Some(key) => self.toleration_keys.iter().any(|k| k == key),
        }
    }

    fn check_template(&self, spec: &ClusterMirrorSpec, out: &mut Vec<Invalid>) {
        let template = &spec.fetcher.template;
        if let Some(class) = &template.priority_class_name
            && !self.priority_classes.contains(class)
        {
            out.push(Invalid {
                field: "spec.fetcher.template.priorityClassName".into(),
                message: format!(
                    "{class:?} is not allowed by this kmirror installation (allowed: {}; the \
                     operator's --allowed-fetcher-priority-classes, chart value \
                     fetcherPolicy.priorityClasses)",
                    if self.priority_classes.is_empty() {
                        "none".to_string()
                    } else {
                        self.priority_classes.join(", ")
                    }
                ),
            });
        }
        for (i, t) in template.tolerations.iter().enumerate() {
            if !self.toleration_allowed(t.key.as_deref()) {
                let what = match t.key.as_deref().filter(|k| !k.is_empty()) {
                    Some(key) => format!("tolerating {key:?}"),
                    None => "a toleration without a key (every taint)".to_string(),
                };
                out.push(Invalid {
                    field: format!("spec.fetcher.template.tolerations[{i}]"),
                    message: format!(
                        "{what} is not allowed by this kmirror installation (allowed keys: {}; \
                         the operator's --allowed-fetcher-toleration-keys, chart value \
                         fetcherPolicy.tolerationKeys)",
                        if self.toleration_keys.is_empty() {
                            format!("any but {CONTROL_PLANE_TAINTS}*")
                        } else {
                            self.toleration_keys.join(", ")
                        }
                    ),
                });
            }
        }
    }

    /// What `spec` asks that the policy does not allow.
    pub fn check(&self, spec: &ClusterMirrorSpec) -> Vec<Invalid> {
        let mut out = Vec::new();
        if let Some(image) = &spec.fetcher.image
            && !self.images.iter().any(|p| image.starts_with(p.as_str()))
        {
            out.push(Invalid {
                field: "spec.fetcher.image".into(),
                message: format!(
                    "{image:?} is not allowed by this kmirror installation (allowed: {}; the \
                     operator's --allowed-fetcher-images, chart value fetcherPolicy.images)",
                    self.images.join(", ")
                ),
            });
        }
        let account = spec
            .fetcher
            .service_account_name
            .as_deref()
            .unwrap_or("default");
        if !self.service_accounts.iter().any(|a| a == account) {
            out.push(Invalid {
                field: "spec.fetcher.serviceAccountName".into(),
                message: format!(
                    "{account:?} is not allowed by this kmirror installation (allowed: {}; the \
                     operator's --allowed-fetcher-service-accounts, chart value \
                     fetcherPolicy.serviceAccounts)",
                    self.service_accounts.join(", ")
                ),
            });
        }
        self.check_template(spec, &mut out);
        out
    }
}

/// Everything wrong with a ClusterMirror for this installation: its spec beyond the schema,
/// and what the fetcher policy does not allow.
pub fn problems(spec: &ClusterMirrorSpec, policy: &FetcherPolicy) -> Vec<Invalid> {
    let mut out = kmirror_crds::validate::cluster_mirror(spec);
    out.extend(policy.check(spec));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(fetcher: serde_json::Value) -> ClusterMirrorSpec {
        serde_json::from_value(serde_json::json!({
            "source": {"bootstrapServers": "a:9092"},
            "destination": {"bootstrapServers": "b:9092"},
            "fetcher": fetcher,
        }))
        .unwrap()
    }

    #[test]
    fn images_and_service_accounts_outside_the_lists_are_refused() {
        let policy = FetcherPolicy::new("", "", "ghcr.io/kmirror/kmirror:0.1.0");
        let strict = FetcherPolicy::new(
            "ghcr.io/kmirror/, registry.internal/mirror@sha256:",
            "default,kmirror-fetcher",
            "unused",
        );
        let cases = [
            (&policy, serde_json::json!({}), vec![]),
            (
                &policy,
                serde_json::json!({"image": "ghcr.io/kmirror/kmirror:0.1.0"}),
                vec![],
            ),
            (
                &policy,
                serde_json::json!({"image": "evil.example/miner:latest"}),
                vec!["spec.fetcher.image"],
            ),
            (
                &policy,
                serde_json::json!({"serviceAccountName": "cluster-admin-sa"}),
                vec!["spec.fetcher.serviceAccountName"],
            ),
            (
                &strict,
                serde_json::json!({"image": "ghcr.io/kmirror/kmirror:0.2.0",
                                   "serviceAccountName": "kmirror-fetcher"}),
                vec![],
            ),
            (
                &strict,
                serde_json::json!({"image": "registry.internal/mirror:latest"}),
                vec!["spec.fetcher.image"],
            ),
        ];
        for (policy, fetcher, expected) in cases {
            let fields: Vec<String> = policy
                .check(&spec(fetcher.clone()))
                .into_iter()
                .map(|p| p.field)
                .collect();
            assert_eq!(fields, expected, "{fetcher}");
        }
        let refusal = &policy.check(&spec(serde_json::json!({"image": "x"})))[0].message;
        assert!(
            refusal.contains("ghcr.io/kmirror/kmirror:0.1.0"),
            "{refusal}"
        );
    }

    #[test]
    fn priority_classes_and_tolerations_are_bounded_by_the_installation() {
        let default = FetcherPolicy::new("", "", "i");
        let listed = FetcherPolicy::new("", "", "i").with_template_bounds("mirroring", "dedicated");
        let any = FetcherPolicy::new("", "", "i").with_template_bounds("", "*");
        let template = |t: serde_json::Value| spec(serde_json::json!({"template": t}));
        let toleration = |key: Option<&str>| {
            template(serde_json::json!({"tolerations": [
                {"key": key, "operator": "Exists", "effect": "NoSchedule"}]}))
        };
        let pc = "spec.fetcher.template.priorityClassName";
        let t0 = "spec.fetcher.template.tolerations[0]";
        let placement = template(serde_json::json!({
            "nodeSelector": {"pool": "kafka"}, "labels": {"team": "a"},
            "annotations": {"cluster-autoscaler.kubernetes.io/safe-to-evict": "true"},
            "affinity": {}, "logLevel": "debug"}));
        let cases: Vec<(&str, &FetcherPolicy, ClusterMirrorSpec, Vec<&str>)> = vec![
            ("placement needs no permission", &default, placement, vec![]),
            (
                "a priority class by default",
                &default,
                template(serde_json::json!({"priorityClassName": "mirroring"})),
                vec![pc],
            ),
            (
                "a listed priority class",
                &listed,
                template(serde_json::json!({"priorityClassName": "mirroring"})),
                vec![],
            ),
            (
                "an unlisted priority class",
                &listed,
                template(serde_json::json!({"priorityClassName": "system-cluster-critical"})),
                vec![pc],
            ),
            (
                "a dedicated-node taint by default",
                &default,
                toleration(Some("dedicated")),
                vec![],
            ),
            (
                "the control plane by default",
                &default,
                toleration(Some("node-role.kubernetes.io/control-plane")),
                vec![t0],
            ),
            (
                "every taint by default",
                &default,
                toleration(None),
                vec![t0],
            ),
            (
                "a listed key",
                &listed,
                toleration(Some("dedicated")),
                vec![],
            ),
            (
                "an unlisted key",
                &listed,
                toleration(Some("gpu")),
                vec![t0],
            ),
            ("every taint under *", &any, toleration(None), vec![]),
        ];
        for (what, policy, spec, expected) in cases {
            let fields: Vec<String> = policy.check(&spec).into_iter().map(|p| p.field).collect();
            assert_eq!(fields, expected, "{what}");
        }
        let refusal = &default.check(&toleration(None))[0].message;
        assert!(
            refusal.contains("--allowed-fetcher-toleration-keys"),
            "{refusal}"
        );
    }
}
