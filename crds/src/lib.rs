//! The `kmirror.io/v1alpha1` API types.
