//! Test-bed support: handles to the real Kafka clusters and the Kubernetes control plane that
//! `e2e/testbed.sh` runs on loopback.
//!
//! A test calls [`Testbed::get`]: it reuses a running bed (one started by `make test` or by hand)
//! or starts one with `e2e/testbed.sh up`, then reads the bed's `env` exports.

pub mod crds;
pub mod docs;
pub mod faults;
pub mod fetcher;
pub mod kafka;
pub mod kube;
pub mod namespace;
pub mod operator;
pub mod soak;
pub mod testbed;
pub mod wire;

pub use testbed::Testbed;

/// Whether a line of `text` (a table a tool printed) starts with these whitespace-separated
/// cells: a whole-cell match, not a substring (`999` does not match `9990`).
pub fn has_row(text: &str, cells: &[&str]) -> bool {
    text.lines().any(|l| {
        let words: Vec<&str> = l.split_whitespace().collect();
        words.len() >= cells.len() && words[..cells.len()] == *cells
    })
}
