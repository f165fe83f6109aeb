//! `kmirror.io/v1alpha1`.

mod cluster_mirror;
mod common;
mod connection;
mod mirror_topic;
mod partition;
mod pod_template;

pub use cluster_mirror::*;
pub use common::*;
pub use connection::*;
pub use mirror_topic::*;
pub use partition::*;
pub use pod_template::*;
