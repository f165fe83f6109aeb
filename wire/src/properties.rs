//! The property keys the wire client reads, accepts and ignores, or refuses, and a small reader
//! of trimmed property values.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use crate::config::PemSource;
use crate::error::WireError;

/// librdkafka tuning keys the wire client accepts and ignores: the batch engine chooses fetch
/// sizes, waits, acks and batching per request, and has no consumer group or producer queue.
pub const IGNORED_TUNING_KEYS: &[&str] = &[
    "acks",
    "allow.auto.create.topics",
    "api.version.request",
    "api.version.request.timeout.ms",
    "auto.commit.interval.ms",
    "auto.offset.reset",
    "batch.num.messages",
    "batch.size",
    "broker.address.family",
    "broker.version.fallback",
    "check.crcs",
    "client.dns.lookup",
    "client.rack",
    "compression.codec",
    "compression.level",
    "compression.type",
    "connections.max.idle.ms",
    "debug",
    "delivery.timeout.ms",
    "enable.auto.commit",
    "enable.auto.offset.store",
    "enable.idempotence",
    "enable.partition.eof",
    "fetch.error.backoff.ms",
    "fetch.max.bytes",
    "fetch.message.max.bytes",
    "fetch.min.bytes",
    "fetch.queue.backoff.ms",
    "fetch.wait.max.ms",
    "group.id",
    "group.instance.id",
    "heartbeat.interval.ms",
    "isolation.level",
    "linger.ms",
    "log.connection.close",
    "log_level",
    "max.in.flight",
    "max.in.flight.requests.per.connection",
    "max.partition.fetch.bytes",
    "max.poll.interval.ms",
    "message.copy.max.bytes",
    "message.max.bytes",
    "message.send.max.retries",
    "message.timeout.ms",
    "partition.assignment.strategy",
    "partitioner",
    "queue.buffering.backpressure.threshold",
    "queue.buffering.max.kbytes",
    "queue.buffering.max.messages",
    "queue.buffering.max.ms",
    "queued.max.messages.kbytes",
    "queued.min.messages",
    "reconnect.backoff.max.ms",
    "reconnect.backoff.ms",
    "retries",
    "session.timeout.ms",
    "socket.keepalive.enable",
    "socket.max.fails",
    "socket.nagle.disable",
    "socket.receive.buffer.bytes",
    "socket.send.buffer.bytes",
    "socket.timeout.ms",
    "statistics.interval.ms",
    "sticky.partitioning.linger.ms",
    "topic.metadata.propagation.max.ms",
    "topic.metadata.refresh.fast.interval.ms",
    "topic.metadata.refresh.interval.ms",
    "topic.metadata.refresh.sparse",
    "transaction.timeout.ms",
];

/// Prefixes of keys that configure security: an unknown key with one of them is an error.
pub(crate) const SECURITY_PREFIXES: &[&str] = &[
    "security.",
    "sasl.",
    "ssl.",
    "ssl_",
    "https.",
    "enable.ssl.",
    "enable.sasl.",
    "ssl.engine.",
];

/// Keys this module reads.
pub(crate) const USED_KEYS: &[&str] = &[
    "bootstrap.servers",
    "metadata.broker.list",
    "client.id",
    "security.protocol",
    "sasl.mechanism",
    "sasl.mechanisms",
    "sasl.username",
    "sasl.password",
    "sasl.oauthbearer.method",
    "sasl.oauthbearer.client.id",
    "sasl.oauthbearer.client.secret",
    "sasl.oauthbearer.token.endpoint.url",
    "sasl.oauthbearer.scope",
    "sasl.oauthbearer.extensions",
    "https.ca.location",
    "https.ca.pem",
    "ssl.ca.location",
    "ssl.ca.pem",
    "ssl.certificate.location",
    "ssl.certificate.pem",
    "ssl.key.location",
    "ssl.key.pem",
    "enable.ssl.certificate.verification",
    "ssl.endpoint.identification.algorithm",
    "request.timeout.ms",
    "socket.connection.setup.timeout.ms",
    "receive.message.max.bytes",
    "retry.backoff.ms",
    "metadata.max.age.ms",
];

/// Reads the properties map; `get` returns the trimmed value of a key.
pub(crate) struct Props<'a>(pub(crate) &'a BTreeMap<String, String>);

impl Props<'_> {
    pub(crate) fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(|v| v.trim()).filter(|v| !v.is_empty())
    }

    pub(crate) fn require(&self, key: &str, why: &str) -> Result<String, WireError> {
        self.get(key)
            .map(str::to_string)
            .ok_or_else(|| WireError::config(key, format!("required {why}")))
    }

    pub(crate) fn millis(&self, key: &str, default: u64) -> Result<Duration, WireError> {
        match self.get(key) {
            None => Ok(Duration::from_millis(default)),
            Some(v) => v
                .parse::<u64>()
                .map(Duration::from_millis)
                .map_err(|_| WireError::config(key, format!("expected milliseconds, got {v:?}"))),
        }
    }

    pub(crate) fn bool(&self, key: &str, default: bool) -> Result<bool, WireError> {
        match self.get(key).map(str::to_ascii_lowercase).as_deref() {
            None => Ok(default),
            Some("true" | "1" | "yes") => Ok(true),
            Some("false" | "0" | "no") => Ok(false),
            Some(v) => Err(WireError::config(
                key,
                format!("expected true or false, got {v:?}"),
            )),
        }
    }

    pub(crate) fn pem(&self, location: &str, inline: &str) -> Result<Option<PemSource>, WireError> {
        match (self.get(location), self.get(inline)) {
            (Some(_), Some(_)) => Err(WireError::config(
                inline,
                format!("set either {location} or {inline}, not both"),
            )),
            (Some(path), None) => Ok(Some(PemSource::File(PathBuf::from(path)))),
            (None, Some(pem)) => Ok(Some(PemSource::Inline(pem.to_string()))),
            (None, None) => Ok(None),
        }
    }
}
