//! Pod IP addresses: one loopback address per pod (127.0.0.10, .11, ... by default), the lowest
//! free one first, so that addresses of deleted pods are reused.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use thiserror::Error;

/// Every address of the range is in use.
#[derive(Debug, Error, PartialEq, Eq)]
#[error("no free pod IP left in {first}..={last}")]
pub struct Exhausted {
    first: Ipv4Addr,
    last: Ipv4Addr,
}

/// Allocates addresses of a contiguous range to pod UIDs.
#[derive(Debug, Clone)]
pub struct Ipam {
    first: u32,
    count: u32,
    owners: BTreeMap<u32, String>,
}

impl Ipam {
    /// A range of `count` addresses starting at `first`.
    pub fn new(first: Ipv4Addr, count: u32) -> Ipam {
        Ipam {
            first: u32::from(first),
            count,
            owners: BTreeMap::new(),
        }
    }

    /// The address of `uid`, allocating the lowest free one if it has none.
    pub fn allocate(&mut self, uid: &str) -> Result<Ipv4Addr, Exhausted> {
        if let Some((&ip, _)) = self.owners.iter().find(|(_, owner)| *owner == uid) {
            return Ok(Ipv4Addr::from(ip));
        }
        let free = (self.first..self.first.saturating_add(self.count))
            .find(|ip| !self.owners.contains_key(ip))
            .ok_or(Exhausted {
                first: Ipv4Addr::from(self.first),
                last: Ipv4Addr::from(self.first + self.count.saturating_sub(1)),
            })?;
        self.owners.insert(free, uid.to_string());
        Ok(Ipv4Addr::from(free))
    }

    /// Records `ip` as taken by `uid` (state restored after a restart). Returns false when the
    /// address is outside the range or already belongs to another pod.
    pub fn restore(&mut self, uid: &str, ip: Ipv4Addr) -> bool {
        let ip = u32::from(ip);
        if ip < self.first || ip >= self.first.saturating_add(self.count) {
            return false;
        }
        match self.owners.get(&ip) {
            Some(owner) => owner == uid,
            None => {
                self.owners.insert(ip, uid.to_string());
                true
            }
        }
    }

    /// Frees the address of `uid`.
    pub fn release(&mut self, uid: &str) {
        self.owners.retain(|_, owner| owner != uid);
    }
}

#[cfg(test)]
mod tests {
    use super::Ipam;
    use std::net::Ipv4Addr;

    #[test]
    fn allocates_lowest_free_and_reuses() {
        let mut ipam = Ipam::new(Ipv4Addr::new(127, 0, 0, 10), 3);
        assert_eq!(ipam.allocate("a").unwrap(), Ipv4Addr::new(127, 0, 0, 10));
        assert_eq!(ipam.allocate("b").unwrap(), Ipv4Addr::new(127, 0, 0, 11));
        assert_eq!(ipam.allocate("a").unwrap(), Ipv4Addr::new(127, 0, 0, 10));
        ipam.release("a");
        assert_eq!(ipam.allocate("c").unwrap(), Ipv4Addr::new(127, 0, 0, 10));
        assert_eq!(ipam.allocate("d").unwrap(), Ipv4Addr::new(127, 0, 0, 12));
        assert!(ipam.allocate("e").is_err());
    }

    #[test]
    fn restores_known_addresses() {
        let mut ipam = Ipam::new(Ipv4Addr::new(127, 0, 0, 10), 10);
        assert!(ipam.restore("a", Ipv4Addr::new(127, 0, 0, 12)));
        assert!(!ipam.restore("b", Ipv4Addr::new(127, 0, 0, 12)));
        assert!(!ipam.restore("b", Ipv4Addr::new(127, 0, 0, 9)));
        assert_eq!(ipam.allocate("b").unwrap(), Ipv4Addr::new(127, 0, 0, 10));
        assert_eq!(ipam.allocate("a").unwrap(), Ipv4Addr::new(127, 0, 0, 12));
    }
}
