//! Connecting to the Kubernetes API the way kubectl does (kubeconfig, context, namespace), and
//! the few reads and writes the commands need, with errors worded for humans.

use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kmirror_crds::v1alpha1::{ClusterMirror, MirrorTopic};
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::cli::GlobalArgs;
use crate::error::{Error, Result};

/// Field manager of every write this plugin makes.
pub const FIELD_MANAGER: &str = "kubectl-mirror";

/// A connected client, the server URL (for messages) and the namespace commands act in.
#[derive(Clone)]
pub struct Kube {
    /// The client.
    pub client: Client,
    /// API server URL.
    pub url: String,
    /// `-n`, else the context's namespace, else `default`.
    pub namespace: String,
    /// The impersonated user (`--as`), for messages.
    pub impersonating: Option<String>,
    /// How long connecting or a response may take (`--request-timeout`), for messages.
    pub timeout: Option<Duration>,
    /// How long the client waits for the next bytes of a response (a watch must end sooner).
    pub read_timeout: Option<Duration>,
}

/// Loads the client configuration: `--kubeconfig` (or `$KUBECONFIG`, or `~/.kube/config`) with
/// `--context`, `--cluster` and `--user`; without any kubeconfig and without those flags, the
/// in-cluster configuration. Impersonation (`--as`, `--as-group`, `--as-uid`) and
/// `--request-timeout` apply to either.
pub async fn load_config(global: &GlobalArgs) -> Result<Config> {
    let mut config = load_base_config(global).await?;
    if let Some(user) = &global.as_user {
        config.auth_info.impersonate = Some(user.clone());
        config.auth_info.impersonate_groups =
            (!global.as_groups.is_empty()).then(|| global.as_groups.clone());
        config.auth_info.impersonate_uid = global.as_uid.clone();
    }
    match global.request_timeout {
        None => {
            config.connect_timeout = Some(Duration::from_secs(10));
            config.read_timeout = Some(Duration::from_secs(60));
        }
        Some(Duration::ZERO) => {
            config.connect_timeout = None;
            config.read_timeout = None;
            config.write_timeout = None;
        }
        Some(limit) => {
            config.connect_timeout = Some(limit);
            config.read_timeout = Some(limit);
            config.write_timeout = Some(limit);
        }
    }
    Ok(config)
}

async fn load_base_config(global: &GlobalArgs) -> Result<Config> {
    let options = KubeConfigOptions {
        context: global.context.clone(),
        cluster: global.cluster.clone(),
        user: global.user.clone(),
    };
    let named = global.context.is_some() || global.cluster.is_some() || global.user.is_some();
    let kubeconfig = match &global.kubeconfig {
        Some(path) => Some(Kubeconfig::read_from(path).map_err(|e| Error::Kubeconfig(chain(&e)))?),
        None => match Kubeconfig::read() {
            Ok(k) => Some(k),
            Err(e) if named => return Err(Error::Kubeconfig(chain(&e))),
            Err(e) => {
                return Config::incluster().map_err(|_| {
                    Error::Kubeconfig(format!("{} (and not running inside a cluster)", chain(&e)))
                });
            }
        },
    };
    let kubeconfig = kubeconfig.expect("set above");
    if let Some(context) = &global.context
        && !kubeconfig.contexts.iter().any(|c| &c.name == context)
    {
        return Err(Error::Kubeconfig(format!(
            "context {context:?} does not exist in the kubeconfig"
        )));
    }
    if let Some(cluster) = &global.cluster
        && !kubeconfig.clusters.iter().any(|c| &c.name == cluster)
    {
        return Err(Error::Kubeconfig(format!(
            "cluster {cluster:?} does not exist in the kubeconfig"
        )));
    }
    if let Some(user) = &global.user
        && !kubeconfig.auth_infos.iter().any(|u| &u.name == user)
    {
        return Err(Error::Kubeconfig(format!(
            "user {user:?} does not exist in the kubeconfig"
        )));
    }
    Config::from_custom_kubeconfig(kubeconfig, &options)
        .await
        .map_err(|e| Error::Kubeconfig(chain(&e)))
}

/// An error and its sources, joined with `: ` (repeated texts left out).
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut parts: Vec<String> = vec![e.to_string()];
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        source = s.source();
    }
    parts.join(": ")
}

/// What a failed request means for the caller.
enum Failure {
    /// The named object does not exist.
    NotFound,
    /// The object exists already (create).
    AlreadyExists,
    /// Anything else, already worded.
    Other(Error),
}

impl Kube {
    /// Connects as configured by the global flags.
    pub async fn connect(global: &GlobalArgs) -> Result<Kube> {
        let config = load_config(global).await?;
        let timeout = config.connect_timeout;
        let read_timeout = config.read_timeout;
        let url = config.cluster_url.to_string();
        let url = url.trim_end_matches('/').to_string();
        let namespace = global
            .namespace
            .clone()
            .unwrap_or_else(|| config.default_namespace.clone());
        let client = Client::try_from(config).map_err(|e| Error::Kubeconfig(chain(&e)))?;
        Ok(Kube {
            client,
            url,
            namespace,
            impersonating: global.as_user.clone(),
            timeout,
            read_timeout,
        })
    }

    fn classify(&self, e: kube::Error) -> Failure {
        match e {
            kube::Error::Api(status) => {
                if status.code == 404 && status.message.contains("could not find the requested") {
                    Failure::Other(Error::CrdsMissing {
                        url: self.url.clone(),
                    })
                } else if status.code == 404 {
                    Failure::NotFound
                } else if status.code == 409 && status.reason == "AlreadyExists" {
                    Failure::AlreadyExists
                } else if status.code == 403 {
                    let hint = match &self.impersonating {
                        Some(user) => format!(
                            " (impersonating {user:?}: it needs a Role granting this; \
                             `kubectl auth can-i --list --as {user}` shows what it may do)"
                        ),
                        None => String::new(),
                    };
                    Failure::Other(Error::Forbidden(format!("{}{hint}", status.message)))
                } else if status.code == 422 || status.code == 400 {
                    // Validation and admission rules (the CRDs' CEL rules, webhooks).
                    Failure::Other(Error::Rejected(status.message.clone()))
                } else if status.code == 401 {
                    Failure::Other(Error::Api(format!(
                        "the API server at {} refused the credentials: {}",
                        self.url, status.message
                    )))
                } else {
                    Failure::Other(Error::Api(status.message.clone()))
                }
            }
            kube::Error::HyperError(_) | kube::Error::Service(_) => {
                let reason = chain(&e);
                let reason = match self.timeout {
                    Some(t) if reason.contains("deadline has elapsed") => format!(
                        "no answer within {} (--request-timeout)",
                        crate::util::format_duration(t)
                    ),
                    _ => reason,
                };
                Failure::Other(Error::Unreachable {
                    url: self.url.clone(),
                    reason,
                })
            }
            kube::Error::Auth(_) => Failure::Other(Error::Kubeconfig(chain(&e))),
            other => Failure::Other(Error::Failed(format!(
                "request to {} failed: {}",
                self.url,
                chain(&other)
            ))),
        }
    }

    fn error(&self, e: kube::Error, what: impl FnOnce() -> String) -> Error {
        match self.classify(e) {
            Failure::NotFound => Error::Failed(format!("{} not found", what())),
            Failure::AlreadyExists => Error::Failed(format!("{} already exists", what())),
            Failure::Other(e) => e,
        }
    }

    /// The ClusterMirrors of a namespace (`None`: every namespace).
    pub fn mirrors_api(&self, namespace: Option<&str>) -> Api<ClusterMirror> {
        match namespace {
            Some(ns) => Api::namespaced(self.client.clone(), ns),
            None => Api::all(self.client.clone()),
        }
    }

    /// The MirrorTopics of a namespace (`None`: every namespace).
    pub fn topics_api(&self, namespace: Option<&str>) -> Api<MirrorTopic> {
        match namespace {
            Some(ns) => Api::namespaced(self.client.clone(), ns),
            None => Api::all(self.client.clone()),
        }
    }

    /// ClusterMirrors of a namespace (`None`: every namespace).
    pub async fn mirrors(&self, namespace: Option<&str>) -> Result<Vec<ClusterMirror>> {
        self.mirrors_api(namespace)
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .map_err(|e| self.error(e, || "ClusterMirrors".into()))
    }

    /// A ClusterMirror, if it exists.
    pub async fn mirror_opt(&self, namespace: &str, name: &str) -> Result<Option<ClusterMirror>> {
        match self.mirrors_api(Some(namespace)).get(name).await {
            Ok(m) => Ok(Some(m)),
            Err(e) => match self.classify(e) {
                Failure::NotFound => Ok(None),
                Failure::AlreadyExists => unreachable!("a read never conflicts"),
                Failure::Other(e) => Err(e),
            },
        }
    }

    /// A ClusterMirror; `MirrorNotFound` when it does not exist.
    pub async fn mirror(&self, namespace: &str, name: &str) -> Result<ClusterMirror> {
        self.mirror_opt(namespace, name)
            .await?
            .ok_or_else(|| Error::MirrorNotFound {
                namespace: namespace.to_string(),
                name: name.to_string(),
            })
    }

    /// MirrorTopics of a namespace (`None`: every namespace).
    pub async fn topics(&self, namespace: Option<&str>) -> Result<Vec<MirrorTopic>> {
        self.topics_api(namespace)
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .map_err(|e| self.error(e, || "MirrorTopics".into()))
    }

    /// The MirrorTopics of one mirror, sorted by source topic.
    pub async fn topics_of(&self, namespace: &str, mirror: &str) -> Result<Vec<MirrorTopic>> {
        let mut topics: Vec<MirrorTopic> = self
            .topics(Some(namespace))
            .await?
            .into_iter()
            .filter(|t| t.spec.mirror == mirror)
            .collect();
        topics.sort_by(|a, b| {
            (&a.spec.source_topic, &a.metadata.name).cmp(&(&b.spec.source_topic, &b.metadata.name))
        });
        Ok(topics)
    }

    /// A MirrorTopic, if it exists.
    pub async fn topic_opt(&self, namespace: &str, name: &str) -> Result<Option<MirrorTopic>> {
        match self.topics_api(Some(namespace)).get(name).await {
            Ok(t) => Ok(Some(t)),
            Err(e) => match self.classify(e) {
                Failure::NotFound => Ok(None),
                Failure::AlreadyExists => unreachable!("a read never conflicts"),
                Failure::Other(e) => Err(e),
            },
        }
    }

    /// Merge-patches a MirrorTopic (as field manager `kubectl-mirror`); returns the result.
    /// `dry_run`: the API server validates and authorizes the patch and stores nothing.
    pub async fn patch_topic(
        &self,
        namespace: &str,
        name: &str,
        patch: &serde_json::Value,
        dry_run: bool,
    ) -> Result<MirrorTopic> {
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.to_string()),
            dry_run,
            ..Default::default()
        };
        self.topics_api(Some(namespace))
            .patch(name, &params, &Patch::Merge(patch))
            .await
            .map_err(|e| match self.classify(e) {
                Failure::Other(Error::Api(m)) => Error::Api(format!("MirrorTopic {name:?}: {m}")),
                Failure::Other(Error::Rejected(m)) => {
                    Error::Rejected(format!("MirrorTopic {name:?}: {m}"))
                }
                Failure::Other(e) => e,
                _ => Error::Failed(format!(
                    "MirrorTopic {name:?} in namespace {namespace:?} disappeared"
                )),
            })
    }

    /// Creates an object (`dry_run`: validated, authorized, not stored); `Ok(None)` when one
    /// with its name exists already.
    async fn create<K>(
        &self,
        api: Api<K>,
        kind: &str,
        object: &K,
        dry_run: bool,
    ) -> Result<Option<K>>
    where
        K: kube::Resource + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
    {
        let params = PostParams {
            field_manager: Some(FIELD_MANAGER.to_string()),
            dry_run,
        };
        let name = object.meta().name.clone().unwrap_or_default();
        match api.create(&params, object).await {
            Ok(o) => Ok(Some(o)),
            Err(e) => match self.classify(e) {
                Failure::AlreadyExists => Ok(None),
                Failure::NotFound => Err(Error::Failed(format!(
                    "cannot create {kind} {name:?}: namespace {:?} not found",
                    self.namespace
                ))),
                Failure::Other(Error::Api(m)) => {
                    Err(Error::Api(format!("cannot create {kind} {name:?}: {m}")))
                }
                Failure::Other(Error::Rejected(m)) => Err(Error::Rejected(format!(
                    "cannot create {kind} {name:?}: {m}"
                ))),
                Failure::Other(e) => Err(e),
            },
        }
    }

    /// Creates a ClusterMirror in `namespace`; `None` when the name is taken.
    pub async fn create_mirror(
        &self,
        namespace: &str,
        mirror: &ClusterMirror,
        dry_run: bool,
    ) -> Result<Option<ClusterMirror>> {
        self.create(
            self.mirrors_api(Some(namespace)),
            "ClusterMirror",
            mirror,
            dry_run,
        )
        .await
    }

    /// Creates a MirrorTopic in `namespace`; `None` when the name is taken.
    pub async fn create_topic(
        &self,
        namespace: &str,
        topic: &MirrorTopic,
        dry_run: bool,
    ) -> Result<Option<MirrorTopic>> {
        self.create(
            self.topics_api(Some(namespace)),
            "MirrorTopic",
            topic,
            dry_run,
        )
        .await
    }

    /// A Secret, if it exists.
    pub async fn secret(&self, namespace: &str, name: &str) -> Result<Option<Secret>> {
        let api: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
        match api.get(name).await {
            Ok(s) => Ok(Some(s)),
            Err(e) => match self.classify(e) {
                Failure::NotFound => Ok(None),
                Failure::AlreadyExists => unreachable!("a read never conflicts"),
                Failure::Other(Error::Api(m)) => Err(Error::Api(format!(
                    "cannot read Secret {name:?} in namespace {namespace:?}: {m}"
                ))),
                Failure::Other(e) => Err(e),
            },
        }
    }
}
