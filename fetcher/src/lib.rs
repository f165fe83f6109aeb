//! The kmirror fetcher: copies source partitions to a destination cluster so that every record
//! keeps its offset (or, where the source has gaps, an exactly recorded translation).
//!
//! Pure logic ([`offset_map`], [`cursor`], [`throttle`], [`state`]) is separated from the Kafka
//! I/O ([`replicator`], [`state_store`], [`kafka_admin`], [`records`]).

pub mod config;
pub mod connection;
pub mod cursor;
pub mod flags;
pub mod http;
pub mod kafka_admin;
pub mod logging;
pub mod metrics;
pub mod offset_map;
pub mod quiet;
pub mod records;
pub mod replicator;
pub mod state;
pub mod state_store;
pub mod throttle;
pub mod verify;

pub use config::{FetcherConfig, Isolation, TruncationPolicy};
pub use connection::ClusterSettings;
pub use replicator::{Handles, Outcome, run};
