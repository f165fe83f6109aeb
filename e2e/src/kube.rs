//! Kubernetes helpers for tests against the bed: a namespace per test (ready for pods, removed
//! afterwards even when the test fails), polling for a condition, and the container logs the
//! node agent writes.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use futures::FutureExt;
use k8s_openapi::api::core::v1::{ConfigMap, ContainerStatus, Pod, ServiceAccount};
use kube::{Api, Client};
use serde::de::DeserializeOwned;

use crate::Testbed;
use crate::namespace;

/// How often [`wait_for`] looks again.
const POLL: Duration = Duration::from_millis(200);

/// Polls `name` until `cond` holds and returns the object; fails after `timeout`, saying `what`
/// was awaited and showing the last state seen.
pub async fn wait_for<K>(
    api: &Api<K>,
    name: &str,
    timeout: Duration,
    what: &str,
    cond: impl Fn(&K) -> bool,
) -> anyhow::Result<K>
where
    K: kube::Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let deadline = Instant::now() + timeout;
    let mut last = None;
    loop {
        if let Some(obj) = api.get_opt(name).await? {
            if cond(&obj) {
                return Ok(obj);
            }
            last = Some(obj);
        }
        if Instant::now() >= deadline {
            anyhow::bail!(
                "timed out after {timeout:?} waiting for {name}: {what}; last seen: {last:#?}"
            );
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Polls until `name` does not exist any more.
pub async fn wait_gone<K>(api: &Api<K>, name: &str, timeout: Duration) -> anyhow::Result<()>
where
    K: kube::Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let deadline = Instant::now() + timeout;
    while api.get_opt(name).await?.is_some() {
        anyhow::ensure!(
            Instant::now() < deadline,
            "{name} still exists after {timeout:?}"
        );
        tokio::time::sleep(POLL).await;
    }
    Ok(())
}

/// Creates a namespace and waits until pods can run there: the `default` ServiceAccount (pod
/// admission needs it) and the `kube-root-ca.crt` ConfigMap (service-account volumes need it).
pub async fn pod_namespace(client: &Client, prefix: &str) -> anyhow::Result<String> {
    let name = namespace::create(client, prefix).await?;
    let timeout = Duration::from_secs(30);
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), &name);
    wait_for(
        &accounts,
        "default",
        timeout,
        "the default ServiceAccount",
        |_| true,
    )
    .await?;
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &name);
    wait_for(
        &maps,
        "kube-root-ca.crt",
        timeout,
        "the root CA ConfigMap",
        |_| true,
    )
    .await?;
    Ok(name)
}

/// Runs `body` with a client and a fresh namespace (see [`pod_namespace`]), then deletes the
/// namespace, also when `body` fails or panics; the failure is passed on.
pub async fn in_namespace<F, Fut>(prefix: &str, body: F)
where
    F: FnOnce(Client, String) -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    let client = Testbed::get().kube_client().await.expect("kube client");
    let ns = pod_namespace(&client, prefix)
        .await
        .expect("create a test namespace");
    let outcome = AssertUnwindSafe(body(client.clone(), ns.clone()))
        .catch_unwind()
        .await;
    namespace::delete(&client, &ns).await;
    match outcome {
        Ok(Ok(())) => {}
        Ok(Err(e)) => panic!("{e:#}"),
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

/// The log file of a container run by the node agent.
pub fn pod_log_path(bed: &Testbed, namespace: &str, pod: &str, container: &str) -> PathBuf {
    PathBuf::from(bed.var("KMIRROR_PODS_DIR"))
        .join(format!("{namespace}_{pod}"))
        .join(format!("{container}.log"))
}

/// The current log of a container ("" when there is none yet).
pub fn pod_log(bed: &Testbed, namespace: &str, pod: &str, container: &str) -> String {
    std::fs::read_to_string(pod_log_path(bed, namespace, pod, container)).unwrap_or_default()
}

/// Waits until a container's log contains every one of `needles`; returns the log.
pub async fn wait_for_log(
    bed: &Testbed,
    namespace: &str,
    pod: &str,
    container: &str,
    needles: &[&str],
    timeout: Duration,
) -> anyhow::Result<String> {
    let deadline = Instant::now() + timeout;
    loop {
        let log = pod_log(bed, namespace, pod, container);
        if needles.iter().all(|n| log.contains(n)) {
            return Ok(log);
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "log of {namespace}/{pod}/{container} lacks {needles:?} after {timeout:?}:\n{log}"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// The status of container `name` of `pod`.
pub fn container_status<'a>(pod: &'a Pod, name: &str) -> Option<&'a ContainerStatus> {
    pod.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == name)
}

/// The status of pod condition `type_` ("True", "False"), if present.
pub fn condition(pod: &Pod, type_: &str) -> Option<String> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| c.status.clone())
}

/// The pod's phase ("" when none is reported).
pub fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

/// Running with its Ready condition True.
pub fn is_ready(pod: &Pod) -> bool {
    phase(pod) == "Running" && condition(pod, "Ready").as_deref() == Some("True")
}

/// The API server's request counters (`apiserver_request_total`, all scopes and codes) by verb
/// and resource, e.g. `("APPLY", "mirrortopics")` (server-side apply, status writes included).
pub async fn apiserver_requests(
    client: &Client,
) -> std::collections::BTreeMap<(String, String), f64> {
    let text = client
        .request_text(http::Request::get("/metrics").body(Vec::new()).unwrap())
        .await
        .expect("the API server's metrics");
    let label = |line: &str, name: &str| -> String {
        let key = format!("{name}=\"");
        line.split_once(&key)
            .and_then(|(_, rest)| rest.split_once('"'))
            .map(|(value, _)| value.to_string())
            .unwrap_or_default()
    };
    let mut out = std::collections::BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| l.starts_with("apiserver_request_total{"))
    {
        if let Some(v) = line.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()) {
            *out.entry((label(line, "verb"), label(line, "resource")))
                .or_insert(0.0) += v;
        }
    }
    out
}
