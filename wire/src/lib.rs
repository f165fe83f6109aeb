//! kmirror-wire: a small async Kafka client that speaks the wire protocol (messages from the
//! `kafka-protocol` crate) for kmirror's batch engine. It fetches record batches as raw bytes,
//! rewrites their headers for the destination, and produces them as they are, without librdkafka.
//!
//! - [`WireConfig::from_properties`] reads the librdkafka-style properties kmirror already uses
//!   (PLAINTEXT, SSL with CA / client certificate, SASL PLAIN, SCRAM-SHA-256/512, OAUTHBEARER with
//!   OIDC client credentials).
//! - [`Client`] keeps one pipelined connection per broker and the cluster metadata, and routes
//!   [`Client::fetch`], [`Client::send_produce`], [`Client::list_offsets`] to partition leaders;
//!   [`Client::init_producer_id`] gives an idempotent producer identity, and
//!   [`Client::offset_for_leader_epoch`] where a leader epoch ends in a partition's log;
//!   [`Client::last_writers`] the producer of each partition's last batch, to go on as
//!   ([`LastWriter`]).
//! - [`batch`] parses batch headers and rewrites them ([`batch::rewrite`]) with a new CRC-32C;
//!   [`records`] decodes (and encodes) the records inside a batch for the record path, and
//!   [`decode_legacy`] the messages of the old formats (magic 0/1).
//!
//! Errors ([`WireError`]) are named after the step that failed and never contain secrets.
//!
//! The copy loop of a batch engine, in short (error handling, the record path for batches that
//! cannot pass, and offset bookkeeping left out):
//!
//! ```no_run
//! # async fn copy(source: kmirror_wire::Client, dest: kmirror_wire::Client) -> Result<(), kmirror_wire::WireError> {
//! use kmirror_wire::{batch, FetchOptions, FetchPartition, ProduceOptions, RawEntry, Rewrite};
//! let producer = dest.init_producer_id().await?;
//! let (mut next, mut sequence, mut in_flight) = (0i64, 0i32, std::collections::VecDeque::new());
//! let fetched = source
//!     .fetch("orders", &[FetchPartition::new(0, next)], &FetchOptions::default())
//!     .await?;
//! for entry in fetched[0].batches() {
//!     let RawEntry::Batch(b) = entry? else { continue }; // magic 0/1: record path
//!     if !b.header.is_dense() || b.header.is_control() { continue } // record path / skip
//!     let rewritten = batch::rewrite(&b.bytes, &Rewrite {
//!         producer_id: producer.id,
//!         producer_epoch: producer.epoch,
//!         base_sequence: sequence,
//!     })?;
//!     sequence = batch::next_sequence(sequence, b.header.record_count);
//!     if in_flight.len() == 5 {
//!         let (pending, expected): (kmirror_wire::InFlightProduce, i64) =
//!             in_flight.pop_front().unwrap();
//!         assert_eq!(pending.wait().await?.base_offset, expected);
//!     }
//!     let pending = dest.send_produce("orders", 0, rewritten, &ProduceOptions::default()).await?;
//!     in_flight.push_back((pending, b.header.base_offset));
//!     next = b.header.next_offset();
//! }
//! # let _ = next; Ok(()) }
//! ```

pub mod batch;
mod client;
pub mod config;
mod connection;
mod entries;
mod epochs;
mod error;
mod fetch;
mod http;
mod last_writer;
mod legacy;
mod legacy_lz4;
mod metadata;
mod oauth;
mod offsets;
mod produce;
mod properties;
pub mod records;
pub mod releases;
mod sasl;
mod scram;
mod tls;

pub use batch::{BatchError, BatchHeader, Codec, RawBatch, RawEntry, RecordBatches, Rewrite};
pub use client::Client;
pub use config::{SecurityProtocol, WireConfig};
pub use epochs::EpochEnd;
pub use error::{KafkaCode, WireError};
pub use fetch::{
    AbortedTransaction, FetchGroup, FetchOptions, FetchPartition, FetchedPartition, Isolation,
};
pub use last_writer::LastWriter;
pub use legacy::decode_legacy;
pub use metadata::{Broker, ClusterMetadata, PartitionMetadata, TopicMetadata};
pub use offsets::{ListedOffset, OffsetSpec};
pub use produce::{InFlightProduce, ProduceOptions, Produced, ProducerIdentity};
pub use properties::IGNORED_TUNING_KEYS;
