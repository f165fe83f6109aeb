//! The `kmirror.io/v1alpha1` API: [`ClusterMirror`](v1alpha1::ClusterMirror) and
//! [`MirrorTopic`](v1alpha1::MirrorTopic), their schema with CEL admission rules, and the pure
//! validators for what admission cannot check (regex syntax, Secret presence is checked by the
//! operator).

pub mod bytes;
pub mod client_properties;
pub mod crdgen;
pub mod duration;
pub mod filter;
pub mod v1alpha1;
pub mod validate;
