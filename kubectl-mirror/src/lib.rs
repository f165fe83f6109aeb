//! `kubectl mirror`: a kubectl plugin for kmirror. It shows the state of `ClusterMirror`s and
//! their `MirrorTopic`s partition by partition, fails topics over (`spec.state: Stopped`),
//! creates the reverse mirror for failback, pauses, resumes and retries topics, runs the
//! record-by-record verifier with the mirror's own connection settings, and translates offsets
//! through a mirror's offset map for applications that keep their own.
//!
//! The crate is a small library with a thin `main`:
//! - [`cli`]: the command line;
//! - [`client`]: kubeconfig, context and namespace handling, API calls and their errors;
//! - [`render`]: pure rendering of tables and JSON/YAML documents;
//! - [`gitops`]: objects managed by Argo CD, Flux or Helm, and the change to commit instead;
//! - [`completion`]: shell completion scripts, and the answers `kubectl mirror <TAB>` asks for;
//! - [`select`], [`reverse`], [`verifier`], [`util`]: the pure logic of the commands;
//! - [`commands`]: the commands themselves.

#![warn(missing_docs)]

pub mod cli;
pub mod client;
pub mod commands;
pub mod completion;
pub mod error;
pub mod gitops;
pub mod render;
pub mod reverse;
pub mod select;
pub mod util;
pub mod verifier;

#[cfg(test)]
mod testing;

pub use commands::run;
pub use error::{Error, Result};
