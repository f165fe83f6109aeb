//! kmirror-wire: a small async Kafka client that speaks the wire protocol (messages from the
//! `kafka-protocol` crate) for kmirror's batch engine. It fetches record batches as raw bytes,
//! rewrites their headers for the destination, and produces them as they are, without librdkafka.
//!
//! - [`WireConfig::from_properties`] reads the librdkafka-style properties kmirror already uses
//!   (PLAINTEXT, SSL with CA / client certificate, SASL PLAIN, SCRAM-SHA-256/512, OAUTHBEARER with
//!   OIDC client credentials).
//! - [`Client`] keeps one pipelined connection per broker and the cluster metadata, and routes
//!   [`Client::fetch`], [`Client::send_produce`], [`Client::list_offsets`] to partition leaders;
//!   [`Client::init_producer_id`] gives an idempotent producer identity.
//! - [`batch`] parses batch headers and rewrites them ([`batch::rewrite`]) with a new CRC-32C;
//!   [`records`] decodes (and encodes) the records inside a batch for the record path.
//!
//! Errors ([`WireError`]) are named after the step that failed and never contain secrets.

pub mod batch;
mod client;
pub mod config;
mod connection;
mod error;
mod fetch;
mod http;
mod metadata;
mod oauth;
mod offsets;
mod produce;
mod properties;
pub mod records;
mod sasl;
mod scram;
mod tls;

pub use batch::{BatchError, BatchHeader, Codec, RawBatch, RawEntry, RecordBatches, Rewrite};
pub use client::Client;
pub use config::{SecurityProtocol, WireConfig};
pub use error::{KafkaCode, WireError};
pub use fetch::{AbortedTransaction, FetchOptions, FetchPartition, FetchedPartition, Isolation};
pub use metadata::{Broker, ClusterMetadata, PartitionMetadata, TopicMetadata};
pub use offsets::{ListedOffset, OffsetSpec};
pub use produce::{InFlightProduce, ProduceOptions, Produced, ProducerIdentity};
pub use properties::IGNORED_TUNING_KEYS;
