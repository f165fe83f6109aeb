//! Isolated pod networks, a fault switch of the test bed: pods of a namespace annotated
//! `kmirror.io/test-network: isolated` run in a network namespace of their own, joined to the
//! host by a veth pair, so that `e2e/testbed.sh pod-net-cut` can cut one pod off (the host end
//! of its link down) while its processes keep running, and `pod-net-restore` join it again.
//!
//! The pod with loopback address 127.0.A.B gets the namespace `kmpod-A-B`, the host interface
//! `kmh-A-B` (10.(213+A).B.1/30) and, inside, `eth0` (10.(213+A).B.2/30): that address is its
//! pod IP. Inside, `lo` stays down and 127.0.0.0/8 is routed to the host end with
//! `route_localnet` on both ends, so the pod reaches the bed's brokers, proxy and API server on
//! the host's 127.0.0.1 with the addresses every other pod uses. Set up with `ip` (iproute2).

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::Command;

/// The namespace annotation that asks for isolated pod networks.
pub const ANNOTATION: &str = "kmirror.io/test-network";
/// Its value.
pub const ISOLATED: &str = "isolated";

/// The names and addresses of one pod's network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodNet {
    /// Network namespace (`ip netns` name).
    pub netns: String,
    /// Host end of the veth pair.
    pub host_if: String,
    /// The host end's address.
    pub host_addr: Ipv4Addr,
    /// The pod's address (its pod IP).
    pub pod_addr: Ipv4Addr,
}

impl PodNet {
    /// The network of the pod whose loopback address is `ip` (127.0.A.B, A < 43).
    pub fn of(ip: Ipv4Addr) -> Result<PodNet, String> {
        let [_, _, a, b] = ip.octets();
        if a >= 43 {
            return Err(format!("no isolated network for pod address {ip}"));
        }
        Ok(PodNet {
            netns: format!("kmpod-{a}-{b}"),
            host_if: format!("kmh-{a}-{b}"),
            host_addr: Ipv4Addr::new(10, 213 + a, b, 1),
            pod_addr: Ipv4Addr::new(10, 213 + a, b, 2),
        })
    }

    /// The file a process joins with setns(CLONE_NEWNET).
    pub fn path(&self) -> PathBuf {
        PathBuf::from("/run/netns").join(&self.netns)
    }

    /// Creates the namespace and its link unless they exist.
    pub fn setup(&self) -> Result<(), String> {
        if self.path().exists() && sys_path(&self.host_if).exists() {
            return Ok(());
        }
        self.teardown();
        let (ns, h) = (self.netns.as_str(), self.host_if.as_str());
        let host = format!("{}/30", self.host_addr);
        let pod = format!("{}/30", self.pod_addr);
        let gw = self.host_addr.to_string();
        ip(&["netns", "add", ns])?;
        ip(&[
            "link", "add", h, "type", "veth", "peer", "name", "eth0", "netns", ns,
        ])?;
        ip(&["addr", "add", &host, "dev", h])?;
        write_sys(&sys_path(h).join("route_localnet"))?;
        ip(&["link", "set", h, "up"])?;
        ip(&["-n", ns, "addr", "add", &pod, "dev", "eth0"])?;
        ip(&["-n", ns, "link", "set", "eth0", "up"])?;
        // /proc/sys/net of the namespace: written from a process inside it.
        ip(&[
            "netns",
            "exec",
            ns,
            "sh",
            "-c",
            "echo 1 > /proc/sys/net/ipv4/conf/eth0/route_localnet && \
             echo 0 > /proc/sys/net/ipv4/conf/eth0/rp_filter && \
             echo 0 > /proc/sys/net/ipv4/conf/all/rp_filter",
        ])?;
        ip(&[
            "-n",
            ns,
            "route",
            "add",
            "127.0.0.0/8",
            "via",
            &gw,
            "dev",
            "eth0",
        ])?;
        ip(&[
            "-n", ns, "route", "add", "default", "via", &gw, "dev", "eth0",
        ])?;
        Ok(())
    }

    /// Removes the namespace (and so both ends of the link); nothing when it is gone.
    pub fn teardown(&self) {
        if self.path().exists() {
            let _ = ip(&["netns", "del", &self.netns]);
        }
        if sys_path(&self.host_if).exists() {
            let _ = ip(&["link", "del", &self.host_if]);
        }
    }
}

fn sys_path(interface: &str) -> PathBuf {
    PathBuf::from("/proc/sys/net/ipv4/conf").join(interface)
}

fn write_sys(path: &std::path::Path) -> Result<(), String> {
    std::fs::write(path, "1\n").map_err(|e| format!("writing {}: {e}", path.display()))
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("running ip {}: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Removes every pod network left behind (`kmirror-node-agent cleanup`).
pub fn remove_all() {
    let Ok(dir) = std::fs::read_dir("/run/netns") else {
        return;
    };
    for entry in dir.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("kmpod-") {
            let _ = ip(&["netns", "del", &name]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_addresses_follow_the_loopback_address() {
        let n = PodNet::of(Ipv4Addr::new(127, 0, 0, 10)).unwrap();
        assert_eq!(n.netns, "kmpod-0-10");
        assert_eq!(n.host_if, "kmh-0-10");
        assert_eq!(n.host_addr, Ipv4Addr::new(10, 213, 10, 1));
        assert_eq!(n.pod_addr, Ipv4Addr::new(10, 213, 10, 2));
        assert_eq!(n.path(), PathBuf::from("/run/netns/kmpod-0-10"));
        let far = PodNet::of(Ipv4Addr::new(127, 0, 42, 255)).unwrap();
        assert!(far.host_if.len() <= 15, "an interface name fits IFNAMSIZ");
        assert!(PodNet::of(Ipv4Addr::new(127, 0, 43, 1)).is_err());
    }
}
