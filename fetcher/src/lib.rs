//! The kmirror fetcher: copies source partitions to a destination cluster so that every record
//! keeps its offset (or, where the source has gaps, an exactly recorded translation).
//!
//! Pure logic ([`cursor`], [`throttle`]) is separated from the Kafka I/O ([`replicator`],
//! [`verify`]). What the fetcher shares with the operator — state records, the offset map,
//! connection settings — lives in the `kmirror-state` crate.

pub mod config;
pub mod cursor;
pub mod http;
pub mod memory;
pub mod metrics;
pub mod replicator;
pub mod supervisor;
pub mod termination;
pub mod throttle;
pub mod verify;

pub use config::{
    Engine, FetcherConfig, Isolation, LeaseSettings, PinnedClusterIds, TruncationPolicy,
};
pub use kmirror_state::ClusterSettings;
pub use replicator::{Handles, Outcome, run};
pub use supervisor::run_topics;
