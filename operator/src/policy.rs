//! What the operator's installer allows a ClusterMirror to ask of fetcher pods: the images they
//! run and the service accounts they run as. Creating a ClusterMirror must not be a way to run
//! any image, or any workload identity, in its namespace.

use kmirror_crds::v1alpha1::ClusterMirrorSpec;
use kmirror_crds::validate::Invalid;

/// The allow-lists (operator flags; the chart's values).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetcherPolicy {
    /// Allowed image prefixes (`registry/repository:` or a whole reference).
    pub images: Vec<String>,
    /// Allowed service account names of fetcher pods (`default`: the namespace's default).
    pub service_accounts: Vec<String>,
}

impl FetcherPolicy {
    /// The policy from comma-separated lists; an empty image list allows the operator's own
    /// fetcher image only, an empty service account list the namespace's `default` only.
    pub fn new(images: &str, service_accounts: &str, default_image: &str) -> FetcherPolicy {
        let list = |s: &str| -> Vec<String> {
            s.split(',')
                .map(str::trim)
                .filter(|x| !x.is_empty())
                .map(String::from)
                .collect()
        };
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
}
