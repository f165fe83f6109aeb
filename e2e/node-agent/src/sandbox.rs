//! The per-pod environment shared by its containers: the pod directory with the private `/tmp`
//! and the pod's `/etc/hosts`, the containers' user identity from the security contexts, and
//! the base environment.

use std::net::Ipv4Addr;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use k8s_openapi::api::core::v1::{Container, Pod};

use crate::launch::{BindMount, UserSpec};

/// The uid used for `runAsNonRoot` containers that name no user (there is no image to ask).
pub const DEFAULT_NON_ROOT_UID: u32 = 65532;

/// The user a container runs as: container security context over pod security context;
/// `None` keeps the agent's identity (root).
pub fn container_user(pod: &Pod, container: &Container) -> Result<Option<UserSpec>, String> {
    let pod_ctx = pod.spec.as_ref().and_then(|s| s.security_context.as_ref());
    let ctx = container.security_context.as_ref();
    let uid = ctx
        .and_then(|c| c.run_as_user)
        .or_else(|| pod_ctx.and_then(|p| p.run_as_user));
    let gid = ctx
        .and_then(|c| c.run_as_group)
        .or_else(|| pod_ctx.and_then(|p| p.run_as_group));
    let non_root = ctx
        .and_then(|c| c.run_as_non_root)
        .or_else(|| pod_ctx.and_then(|p| p.run_as_non_root))
        .unwrap_or(false);
    let uid = match (uid, non_root) {
        (Some(0), true) => {
            return Err(
                "container's runAsUser breaks non-root policy (runAsNonRoot with runAsUser 0)"
                    .into(),
            );
        }
        (None, true) => Some(i64::from(DEFAULT_NON_ROOT_UID)),
        (uid, _) => uid,
    };
    if uid.is_none() && gid.is_none() {
        return Ok(None);
    }
    let mut groups: Vec<u32> = pod_ctx
        .and_then(|p| p.supplemental_groups.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|g| g as u32)
        .collect();
    if let Some(fs_group) = pod_ctx.and_then(|p| p.fs_group) {
        groups.push(fs_group as u32);
    }
    Ok(Some(UserSpec {
        uid: uid.unwrap_or(0) as u32,
        gid: gid.unwrap_or(0) as u32,
        groups,
    }))
}

/// Owner (uid, gid) of the pod's volume files: the user of the first container with one,
/// with the pod's `fsGroup` as group when set.
pub fn volume_owner(pod: &Pod) -> Option<(u32, u32)> {
    let spec = pod.spec.as_ref()?;
    let fs_group = spec
        .security_context
        .as_ref()
        .and_then(|p| p.fs_group)
        .map(|g| g as u32);
    let user = spec
        .init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter())
        .find_map(|c| container_user(pod, c).ok().flatten());
    match (user, fs_group) {
        (Some(u), g) => Some((u.uid, g.unwrap_or(u.gid))),
        (None, Some(g)) => Some((0, g)),
        (None, None) => None,
    }
}

/// The pod's `/etc/hosts`: localhost, the pod's own name, the API server's service names (at
/// the address pods reach it on), and `hostAliases`.
pub fn hosts_file(pod: &Pod, pod_ip: Ipv4Addr, api_host: &str) -> String {
    let name = pod.metadata.name.as_deref().unwrap_or("pod");
    let spec = pod.spec.as_ref();
    let mut text = String::from("# Kubernetes-managed hosts file (kmirror node agent).\n");
    text.push_str("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n");
    let hostname = spec.and_then(|s| s.hostname.as_deref()).unwrap_or(name);
    match spec.and_then(|s| s.subdomain.as_deref()) {
        Some(sub) => {
            let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
            text.push_str(&format!(
                "{pod_ip}\t{hostname}.{sub}.{ns}.svc.cluster.local\t{hostname}\n"
            ));
        }
        None => text.push_str(&format!("{pod_ip}\t{hostname}\n")),
    }
    if api_host.parse::<std::net::IpAddr>().is_ok() {
        text.push_str(&format!(
            "{api_host}\tkubernetes kubernetes.default kubernetes.default.svc kubernetes.default.svc.cluster.local\n"
        ));
    }
    for alias in spec
        .and_then(|s| s.host_aliases.as_ref())
        .into_iter()
        .flatten()
    {
        let names = alias.hostnames.clone().unwrap_or_default().join("\t");
        text.push_str(&format!("{}\t{names}\n", alias.ip));
    }
    text
}

/// Creates the pod directory with its private `/tmp` and `/etc/hosts` and returns the mounts
/// every container gets (the latter unless the pod uses the host network).
pub fn prepare(
    pod_dir: &Path,
    pod: &Pod,
    pod_ip: Ipv4Addr,
    api_host: &str,
) -> std::io::Result<Vec<BindMount>> {
    let tmp = pod_dir.join("tmp");
    std::fs::create_dir_all(&tmp)?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o1777))?;
    let mut mounts = vec![BindMount {
        source: tmp,
        target: "/tmp".into(),
        read_only: false,
    }];
    let host_network = pod
        .spec
        .as_ref()
        .and_then(|s| s.host_network)
        .unwrap_or(false);
    if !host_network {
        let hosts = pod_dir.join("hosts");
        std::fs::write(&hosts, hosts_file(pod, pod_ip, api_host))?;
        std::fs::set_permissions(&hosts, std::fs::Permissions::from_mode(0o644))?;
        mounts.push(BindMount {
            source: hosts,
            target: "/etc/hosts".into(),
            read_only: false,
        });
    }
    Ok(mounts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(json: serde_json::Value) -> Pod {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn users_from_security_contexts() {
        let p = pod(serde_json::json!({"metadata": {"name": "p"}, "spec": {
            "securityContext": {"runAsUser": 1000, "fsGroup": 2000, "supplementalGroups": [3000]},
            "containers": [{"name": "a"}, {"name": "b", "securityContext": {"runAsUser": 1001, "runAsGroup": 5}}]
        }}));
        let spec = p.spec.clone().unwrap();
        assert_eq!(
            container_user(&p, &spec.containers[0]).unwrap(),
            Some(UserSpec {
                uid: 1000,
                gid: 0,
                groups: vec![3000, 2000]
            })
        );
        assert_eq!(
            container_user(&p, &spec.containers[1])
                .unwrap()
                .unwrap()
                .uid,
            1001
        );
        assert_eq!(volume_owner(&p), Some((1000, 2000)));

        let root = pod(
            serde_json::json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "a"}]}}),
        );
        let c = root.spec.clone().unwrap().containers[0].clone();
        assert_eq!(container_user(&root, &c).unwrap(), None);
        assert_eq!(volume_owner(&root), None);

        let non_root = pod(serde_json::json!({"metadata": {"name": "p"}, "spec": {
            "securityContext": {"runAsNonRoot": true}, "containers": [{"name": "a"}]}}));
        let c = non_root.spec.clone().unwrap().containers[0].clone();
        assert_eq!(
            container_user(&non_root, &c).unwrap().unwrap().uid,
            DEFAULT_NON_ROOT_UID
        );
        let contradiction = pod(serde_json::json!({"metadata": {"name": "p"}, "spec": {
            "securityContext": {"runAsNonRoot": true, "runAsUser": 0}, "containers": [{"name": "a"}]}}));
        let c = contradiction.spec.clone().unwrap().containers[0].clone();
        assert!(container_user(&contradiction, &c).is_err());
    }

    #[test]
    fn hosts_file_names_the_pod_and_the_api_server() {
        let p = pod(
            serde_json::json!({"metadata": {"name": "web-0", "namespace": "ns"}, "spec": {
            "subdomain": "web", "containers": [],
            "hostAliases": [{"ip": "127.0.0.1", "hostnames": ["kafka.local"]}]}}),
        );
        let text = hosts_file(&p, Ipv4Addr::new(127, 0, 0, 10), "127.0.0.1");
        assert!(
            text.contains("127.0.0.10\tweb-0.web.ns.svc.cluster.local\tweb-0\n"),
            "{text}"
        );
        assert!(text.contains("127.0.0.1\tkubernetes kubernetes.default kubernetes.default.svc"));
        assert!(text.contains("127.0.0.1\tkafka.local\n"));
    }
}
