//! The kmirror operator: reconciles `ClusterMirror` and `MirrorTopic` resources into destination
//! topics, fetcher pods, a persisted partition lifecycle and a true status.
//!
//! A `MirrorTopic` reconcile is observe → plan → execute ([`mirror_topic`]): all reads gathered
//! into one observation, a pure plan (the lifecycle of [`lifecycle`], pod specs of [`pods`],
//! failback decisions, the status), then the writes in order — transitions persisted before
//! anything acts on them. Other pure parts: client settings ([`connection`]), destination topic
//! configs and their diffs ([`topic_configs`]), ACL plans ([`sync::acl_plan`]), status helpers
//! ([`status`]).

pub mod cluster_mirror;
pub mod clusters;
pub mod config_fit;
pub mod connection;
pub mod context;
pub mod controllers;
pub mod destination_release;
pub mod destination_topic;
pub mod error;
pub mod error_backoff;
pub mod failback;
pub mod failover;
pub mod failpoint;
pub mod http;
pub mod identity;
pub mod kafka;
pub mod leader;
pub mod leases;
pub mod lifecycle;
pub mod metrics;
pub mod mirror_topic;
pub mod pods;
pub mod policy;
pub mod pool;
pub mod pool_pods;
pub mod rate_limit;
pub mod reconcile;
pub mod rollout;
pub mod scope;
pub mod source_gone;
pub mod state_cache;
pub mod status;
pub mod status_writer;
pub mod sync;
pub mod topic_configs;
pub mod watch_cache;

pub use controllers::run;
