//! Objects that a GitOps tool (Argo CD, Flux) or Helm manages: who manages an object (from its
//! labels, annotations and field managers), whether the manifest it applies sets the fields a
//! command changes, the warning to print before changing it, and the change as YAML to commit
//! to Git instead (`--print-patch`). Pure.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{Value, json};

/// Argo CD's tracking annotation (`<app>:<group>/<kind>:<namespace>/<name>`).
pub const ARGOCD_TRACKING_ID: &str = "argocd.argoproj.io/tracking-id";
/// The key Argo CD installations commonly set as their tracking label (or annotation).
pub const ARGOCD_INSTANCE: &str = "argocd.argoproj.io/instance";
/// Argo CD's default tracking label before 3.0, also set by Helm charts and other tools.
pub const APP_INSTANCE: &str = "app.kubernetes.io/instance";
/// Flux kustomize-controller's labels.
pub const FLUX_KUSTOMIZATION_NAME: &str = "kustomize.toolkit.fluxcd.io/name";
/// Namespace of the Flux Kustomization.
pub const FLUX_KUSTOMIZATION_NAMESPACE: &str = "kustomize.toolkit.fluxcd.io/namespace";
/// Flux helm-controller's labels.
pub const FLUX_HELMRELEASE_NAME: &str = "helm.toolkit.fluxcd.io/name";
/// Namespace of the Flux HelmRelease.
pub const FLUX_HELMRELEASE_NAMESPACE: &str = "helm.toolkit.fluxcd.io/namespace";
/// Set by `helm install|upgrade` (not by `helm template`).
pub const HELM_RELEASE_NAME: &str = "meta.helm.sh/release-name";
/// Namespace of the Helm release.
pub const HELM_RELEASE_NAMESPACE: &str = "meta.helm.sh/release-namespace";
/// kubectl's client-side apply record.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// A tool that applies the object from a source of truth other than this plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Tool {
    /// Argo CD.
    ArgoCd,
    /// Flux.
    Flux,
    /// A Helm release (`helm upgrade` sets the chart's values again).
    Helm,
}

impl Tool {
    /// The tool's name.
    pub fn name(self) -> &'static str {
        match self {
            Tool::ArgoCd => "Argo CD",
            Tool::Flux => "Flux",
            Tool::Helm => "Helm",
        }
    }
}

/// One tool that manages an object, and how that was recognised.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manager {
    /// The tool.
    pub tool: Tool,
    /// What of the tool owns it, e.g. `Application shop-dr`, `Kustomization flux-system/apps`.
    pub owner: Option<String>,
    /// The label, annotation or field manager it was recognised by.
    pub evidence: String,
}

impl Manager {
    /// E.g. `Argo CD (Application shop-dr, annotation argocd.argoproj.io/tracking-id)`.
    pub fn describe(&self) -> String {
        match &self.owner {
            Some(owner) => format!("{} ({owner}, {})", self.tool.name(), self.evidence),
            None => format!("{} ({})", self.tool.name(), self.evidence),
        }
    }
}

fn map_get<'a>(map: &'a Option<BTreeMap<String, String>>, key: &str) -> Option<&'a str> {
    map.as_ref()
        .and_then(|m| m.get(key))
        .map(String::as_str)
        .filter(|v| !v.is_empty())
}

/// The tools that manage an object, at most one entry per tool, Argo CD first.
pub fn managers(meta: &ObjectMeta) -> Vec<Manager> {
    let labels = &meta.labels;
    let annotations = &meta.annotations;
    let mut found: Vec<Manager> = Vec::new();
    fn add(found: &mut Vec<Manager>, m: Manager) {
        if !found.iter().any(|f| f.tool == m.tool) {
            found.push(m);
        }
    }
    if let Some(id) = map_get(annotations, ARGOCD_TRACKING_ID) {
        // `<app>` or `<app namespace>_<app>` before the first ':'.
        let app = id.split(':').next().unwrap_or(id).replacen('_', "/", 1);
        add(
            &mut found,
            Manager {
                tool: Tool::ArgoCd,
                owner: Some(format!("Application {app}")),
                evidence: format!("annotation {ARGOCD_TRACKING_ID}"),
            },
        );
    }
    for (map, what) in [(labels, "label"), (annotations, "annotation")] {
        if let Some(app) = map_get(map, ARGOCD_INSTANCE) {
            add(
                &mut found,
                Manager {
                    tool: Tool::ArgoCd,
                    owner: Some(format!("Application {app}")),
                    evidence: format!("{what} {ARGOCD_INSTANCE}"),
                },
            );
        }
    }
    let flux = [
        (
            FLUX_KUSTOMIZATION_NAME,
            FLUX_KUSTOMIZATION_NAMESPACE,
            "Kustomization",
        ),
        (
            FLUX_HELMRELEASE_NAME,
            FLUX_HELMRELEASE_NAMESPACE,
            "HelmRelease",
        ),
    ];
    for (name_key, ns_key, kind) in flux {
        if let Some(name) = map_get(labels, name_key) {
            let owner = match map_get(labels, ns_key) {
                Some(ns) => format!("{kind} {ns}/{name}"),
                None => format!("{kind} {name}"),
            };
            add(
                &mut found,
                Manager {
                    tool: Tool::Flux,
                    owner: Some(owner),
                    evidence: format!("label {name_key}"),
                },
            );
        }
    }
    let helm_release = map_get(annotations, HELM_RELEASE_NAME);
    if let Some(release) = helm_release
        && !found.iter().any(|m| m.tool == Tool::Flux)
    {
        let owner = match map_get(annotations, HELM_RELEASE_NAMESPACE) {
            Some(ns) => format!("release {ns}/{release}"),
            None => format!("release {release}"),
        };
        add(
            &mut found,
            Manager {
                tool: Tool::Helm,
                owner: Some(owner),
                evidence: format!("annotation {HELM_RELEASE_NAME}"),
            },
        );
    }
    // Argo CD's label tracking; without a Helm release annotation (Helm sets the same label).
    if helm_release.is_none()
        && let Some(app) = map_get(labels, APP_INSTANCE)
    {
        add(
            &mut found,
            Manager {
                tool: Tool::ArgoCd,
                owner: Some(format!("Application {app}")),
                evidence: format!("label {APP_INSTANCE}, Argo CD's tracking label"),
            },
        );
    }
    // Server-side apply by the tools' controllers.
    for entry in meta.managed_fields.iter().flatten() {
        let manager = entry.manager.as_deref().unwrap_or_default();
        let tool = match manager {
            "argocd-controller" | "argocd-application-controller" => Tool::ArgoCd,
            "kustomize-controller" | "helm-controller" => Tool::Flux,
            _ => continue,
        };
        add(
            &mut found,
            Manager {
                tool,
                owner: None,
                evidence: format!("field manager {manager}"),
            },
        );
    }
    found.sort_by_key(|m| m.tool);
    found
}

fn has_path(value: &Value, path: &[&str]) -> bool {
    path.iter()
        .try_fold(value, |v, key| v.get(*key))
        .is_some_and(|v| !v.is_null())
}

/// Whether the manifest a tool applies sets the field at `path` (e.g. `["spec", "state"]`):
/// `Some(true)` when kubectl's last-applied record holds it or a server-side applier (another
/// field manager than this plugin) owns it; `Some(false)` when such a record or applier exists
/// and does not; `None` when nothing tells, or when an imperative change (an update, e.g. by this
/// plugin) took the field from a server-side applier, which may force it back.
pub fn declares(meta: &ObjectMeta, path: &[&str]) -> Option<bool> {
    let last_applied = map_get(&meta.annotations, LAST_APPLIED)
        .and_then(|text| serde_json::from_str::<Value>(text).ok())
        .map(|applied| has_path(&applied, path));
    let fields: Vec<String> = path.iter().map(|p| format!("f:{p}")).collect();
    let fields: Vec<&str> = fields.iter().map(String::as_str).collect();
    let (mut applier, mut applier_owns, mut other_owns) = (false, false, false);
    for entry in meta.managed_fields.iter().flatten() {
        let owns = entry
            .fields_v1
            .as_ref()
            .is_some_and(|f| has_path(&f.0, &fields));
        let apply = entry.operation.as_deref() == Some("Apply")
            && entry.manager.as_deref() != Some(crate::client::FIELD_MANAGER);
        if apply {
            applier = true;
            applier_owns |= owns;
        } else {
            other_owns |= owns;
        }
    }
    if applier_owns || last_applied == Some(true) {
        return Some(true);
    }
    if last_applied == Some(false) && !applier {
        return Some(false);
    }
    if applier {
        return (!other_owns).then_some(false);
    }
    last_applied
}

/// The warning for changing the field at `path` (e.g. `["spec", "state"]`) of a managed object
/// (`object`: `kind namespace/name`); `None` when no tool manages it.
pub fn warning(object: &str, meta: &ObjectMeta, path: &[&str]) -> Option<String> {
    let managers = managers(meta);
    let first = managers.first()?;
    let by: Vec<String> = managers.iter().map(Manager::describe).collect();
    let field = path.join(".");
    let revert = match first.tool {
        Tool::ArgoCd => "an automated sync with self-heal sets it back",
        Tool::Flux => "its next reconciliation sets it back",
        Tool::Helm => "the next `helm upgrade` sets it back",
    };
    let consequence = match declares(meta, path) {
        Some(true) => format!("its manifest sets {field}: {revert}"),
        Some(false) => format!(
            "its manifest does not set {field}, so a sync leaves the change alone, but Git no \
             longer describes the object"
        ),
        None => format!("if its manifest sets {field}, {revert}"),
    };
    let advice = match first.tool {
        Tool::ArgoCd => {
            "Commit the change to Git instead (--print-patch prints it), or turn self-heal off \
             for the Application first"
        }
        Tool::Flux => {
            "Commit the change to Git instead (--print-patch prints it), or suspend the \
             Kustomization or HelmRelease first (flux suspend)"
        }
        Tool::Helm => "Set it in the release's values too (--print-patch prints the change)",
    };
    Some(format!(
        "{object} is managed by {}; {consequence}. {advice}.",
        by.join(" and ")
    ))
}

/// The warning for creating objects that belong with a managed object (the reverse mirror of
/// a failback); `None` when no tool manages `meta`.
pub fn creation_warning(object: &str, meta: &ObjectMeta) -> Option<String> {
    let managers = managers(meta);
    managers.first()?;
    let by: Vec<String> = managers.iter().map(Manager::describe).collect();
    Some(format!(
        "{object} is managed by {}; the objects created now are not in Git (a sync neither \
         changes nor prunes them). Commit them to Git too: --print-patch prints them.",
        by.join(" and ")
    ))
}

/// The change to commit for one object: a YAML document with its apiVersion, kind, name and
/// namespace and the fields of `patch` (a JSON merge patch), preceded by a comment naming the
/// object and who manages it.
pub fn patch_document(api_version: &str, kind: &str, meta: &ObjectMeta, patch: &Value) -> String {
    let name = meta.name.clone().unwrap_or_default();
    let namespace = meta.namespace.clone().unwrap_or_default();
    let mut doc = json!({
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"name": name, "namespace": namespace},
    });
    merge(&mut doc, patch);
    let managers = managers(meta);
    let by = if managers.is_empty() {
        "no GitOps tool or Helm release manages it".to_string()
    } else {
        let names: Vec<String> = managers.iter().map(Manager::describe).collect();
        format!("managed by {}", names.join(" and "))
    };
    format!(
        "# {kind} {namespace}/{name}: {by}.\n# Set these fields in its manifest in Git (or use \
         the document as a kustomize patch).\n{}",
        serde_yaml::to_string(&doc).expect("a JSON value serializes as YAML")
    )
}

/// JSON merge patch (RFC 7386) of `patch` into `target`.
pub fn merge(target: &mut Value, patch: &Value) {
    match (target.as_object_mut(), patch.as_object()) {
        (Some(t), Some(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        _ => *target = patch.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};

    fn meta(labels: &[(&str, &str)], annotations: &[(&str, &str)]) -> ObjectMeta {
        let map = |kv: &[(&str, &str)]| {
            (!kv.is_empty()).then(|| {
                kv.iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect()
            })
        };
        ObjectMeta {
            name: Some("dr-orders".into()),
            namespace: Some("shop".into()),
            labels: map(labels),
            annotations: map(annotations),
            ..Default::default()
        }
    }

    fn tools(m: &ObjectMeta) -> Vec<(Tool, Option<String>)> {
        managers(m).into_iter().map(|m| (m.tool, m.owner)).collect()
    }

    #[test]
    fn recognises_argo_cd_flux_and_helm() {
        assert!(managers(&meta(&[], &[])).is_empty());
        assert_eq!(
            tools(&meta(
                &[],
                &[(
                    ARGOCD_TRACKING_ID,
                    "argocd_shop-dr:kmirror.io/MirrorTopic:shop/dr-orders"
                )]
            )),
            [(Tool::ArgoCd, Some("Application argocd/shop-dr".into()))]
        );
        assert_eq!(
            tools(&meta(&[(ARGOCD_INSTANCE, "dr")], &[])),
            [(Tool::ArgoCd, Some("Application dr".into()))]
        );
        assert_eq!(
            tools(&meta(&[(APP_INSTANCE, "dr")], &[])),
            [(Tool::ArgoCd, Some("Application dr".into()))]
        );
        assert_eq!(
            tools(&meta(
                &[
                    (FLUX_KUSTOMIZATION_NAME, "apps"),
                    (FLUX_KUSTOMIZATION_NAMESPACE, "flux-system")
                ],
                &[]
            )),
            [(Tool::Flux, Some("Kustomization flux-system/apps".into()))]
        );
        // A Flux HelmRelease: helm's own markers do not add a second entry, and the instance
        // label set by the chart is not taken for Argo CD's.
        assert_eq!(
            tools(&meta(
                &[
                    (FLUX_HELMRELEASE_NAME, "kmirror"),
                    (FLUX_HELMRELEASE_NAMESPACE, "ops"),
                    (APP_INSTANCE, "kmirror")
                ],
                &[(HELM_RELEASE_NAME, "kmirror")]
            )),
            [(Tool::Flux, Some("HelmRelease ops/kmirror".into()))]
        );
        assert_eq!(
            tools(&meta(
                &[(APP_INSTANCE, "kmirror")],
                &[
                    (HELM_RELEASE_NAME, "kmirror"),
                    (HELM_RELEASE_NAMESPACE, "ops")
                ]
            )),
            [(Tool::Helm, Some("release ops/kmirror".into()))]
        );
        let mut m = meta(&[], &[]);
        m.managed_fields = Some(vec![ManagedFieldsEntry {
            manager: Some("kustomize-controller".into()),
            operation: Some("Apply".into()),
            ..Default::default()
        }]);
        assert_eq!(tools(&m), [(Tool::Flux, None)]);
    }

    #[test]
    fn declared_fields_from_last_applied_and_server_side_apply() {
        let applied = r#"{"apiVersion":"kmirror.io/v1alpha1","kind":"MirrorTopic","spec":{"mirror":"dr","state":"Mirroring"}}"#;
        let m = meta(&[], &[(LAST_APPLIED, applied)]);
        assert_eq!(declares(&m, &["spec", "state"]), Some(true));
        assert_eq!(declares(&m, &["spec", "divergencePolicy"]), Some(false));
        assert_eq!(declares(&meta(&[], &[]), &["spec", "state"]), None);
        let mut m = meta(&[], &[]);
        let entry = |manager: &str, fields: Value| ManagedFieldsEntry {
            manager: Some(manager.into()),
            operation: Some("Apply".into()),
            fields_v1: Some(FieldsV1(fields)),
            ..Default::default()
        };
        m.managed_fields = Some(vec![
            entry(
                crate::client::FIELD_MANAGER,
                json!({"f:spec": {"f:failover": {}}}),
            ),
            entry(
                "argocd-controller",
                json!({"f:spec": {"f:mirror": {}, "f:state": {}}}),
            ),
        ]);
        assert_eq!(declares(&m, &["spec", "state"]), Some(true));
        assert_eq!(
            declares(&m, &["spec", "failover"]),
            None,
            "taken by an update"
        );
        assert_eq!(declares(&m, &["spec", "divergencePolicy"]), Some(false));
        // Flux applied the object without spec.state; this plugin changed it since: Flux
        // (server-side apply with force) may or may not set it back, depending on its manifest.
        let mut m = meta(&[], &[]);
        m.managed_fields = Some(vec![
            entry("kustomize-controller", json!({"f:spec": {"f:mirror": {}}})),
            ManagedFieldsEntry {
                manager: Some(crate::client::FIELD_MANAGER.into()),
                operation: Some("Update".into()),
                fields_v1: Some(FieldsV1(json!({"f:spec": {"f:state": {}}}))),
                ..Default::default()
            },
        ]);
        assert_eq!(declares(&m, &["spec", "state"]), None);
        assert_eq!(declares(&m, &["spec", "failover"]), Some(false));
    }

    #[test]
    fn warning_says_who_and_what_to_do() {
        assert_eq!(
            warning("MirrorTopic shop/x", &meta(&[], &[]), &["spec", "state"]),
            None
        );
        let applied = r#"{"spec":{"state":"Mirroring"}}"#;
        let m = meta(&[(ARGOCD_INSTANCE, "dr")], &[(LAST_APPLIED, applied)]);
        assert_eq!(
            warning("MirrorTopic shop/dr-orders", &m, &["spec", "state"]).unwrap(),
            "MirrorTopic shop/dr-orders is managed by Argo CD (Application dr, label \
             argocd.argoproj.io/instance); its manifest sets spec.state: an automated sync with \
             self-heal sets it back. Commit the change to Git instead (--print-patch prints it), \
             or turn self-heal off for the Application first."
        );
        let m = meta(&[(FLUX_KUSTOMIZATION_NAME, "apps")], &[]);
        let w = warning("MirrorTopic shop/dr-orders", &m, &["spec", "state"]).unwrap();
        assert!(w.contains("Flux (Kustomization apps, label"), "{w}");
        assert!(w.contains("if its manifest sets spec.state"), "{w}");
        assert!(w.contains("flux suspend"), "{w}");
    }

    #[test]
    fn patch_documents_are_yaml_to_commit() {
        let m = meta(&[(ARGOCD_INSTANCE, "dr")], &[]);
        let text = patch_document(
            "kmirror.io/v1alpha1",
            "MirrorTopic",
            &m,
            &json!({"spec": {"state": "Stopped", "failover": {"mode": "Graceful"}}}),
        );
        assert!(
            text.starts_with(
                "# MirrorTopic shop/dr-orders: managed by Argo CD (Application dr, label \
                 argocd.argoproj.io/instance).\n"
            ),
            "{text}"
        );
        let doc: Value = serde_yaml::from_str(&text).unwrap();
        assert_eq!(
            doc,
            json!({"apiVersion": "kmirror.io/v1alpha1", "kind": "MirrorTopic",
                   "metadata": {"name": "dr-orders", "namespace": "shop"},
                   "spec": {"state": "Stopped", "failover": {"mode": "Graceful"}}})
        );
    }

    #[test]
    fn merge_patch_semantics() {
        let mut v = json!({"a": {"b": 1, "c": 2}, "d": 3});
        merge(&mut v, &json!({"a": {"b": null, "e": 4}, "d": [1]}));
        assert_eq!(v, json!({"a": {"c": 2, "e": 4}, "d": [1]}));
    }
}
