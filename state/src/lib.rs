//! The contract between kmirror processes: what the fetcher and the operator both read and write.
//!
//! - [`records`]: the records of the state topic (`__kmirror_state`) and their versioned JSON —
//!   partition states (operator), positions and offset-map chunks (fetcher), stop reasons;
//! - [`fence`]: operator claims of a mirror and the fencing tokens of operator-written records;
//! - [`store`]: reading the state topic to its end and writing records durably;
//! - [`leases`] and [`lease_io`]: the lease topic's records (one writer per destination
//!   partition), the holder's validity arithmetic, and reading and writing them;
//! - [`offset_map`]: the exact source ↔ destination offset map;
//! - [`partition_view`]: a partition's status projected from its records;
//! - [`kafka_admin`]: the admin calls rdkafka's Rust API lacks (topic IDs, ACLs, configs);
//! - [`kafka_record`]: owned record copies, their comparison, reading one record;
//! - [`connection`] and [`flags`]: how a process is told to reach the two clusters;
//! - [`logging`] and [`quiet`]: the shared `tracing` set-up and a quiet end-of-partition context;
//! - [`build_info`]: the version, commit and compiler of the build.

pub mod build_info;
pub mod connection;
pub mod fence;
pub mod flags;
pub mod kafka_admin;
pub mod kafka_record;
pub mod lease_io;
pub mod leases;
pub mod logging;
pub mod offset_map;
pub mod partition_view;
pub mod pool;
pub mod quiet;
pub mod records;
pub mod stop_line;
pub mod store;
pub mod translate;

pub use connection::ClusterSettings;
