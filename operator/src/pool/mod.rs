//! Fetcher pools: the partitions of every topic of a `ClusterMirror` with `spec.fetcher.pool`
//! run on a fixed number of fetcher pods (`<mirror>-pool-<i>`), each process copying several
//! topics. Each topic's reconcile keeps its partitions' lifecycle and write leases as for
//! per-topic pods and reports what it wants ([`demand`]); the pool — a loop of the leader
//! (`crate::pool_pods`), woken by those reports and every few seconds — assigns the wanted
//! partitions to pods ([`plan`], rendezvous hashing) and replaces the pods whose assignment
//! changed ([`pod`]). This module is pure but for the demand's shared map.

pub mod demand;
pub mod plan;
pub mod pod;
#[cfg(test)]
mod template_tests;

pub use pod::{ANNOTATION_UNITS, LABEL_POOL};
