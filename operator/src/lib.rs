//! The kmirror operator: reconciles ClusterMirror and MirrorTopic resources.
