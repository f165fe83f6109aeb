//! Which librdkafka properties a spec may set: an allow-list of tuning keys per client, with
//! librdkafka's aliases resolved first. Everything else — connection basics, security,
//! delivery guarantees, secrets — belongs to kmirror and is refused (at admission by CEL rules
//! built from these lists, and again by the operator for objects admitted before).

/// Which client a property map configures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Client {
    /// `spec.{source,destination}.properties`: every client of that cluster, the operator's too.
    Connection,
    /// `spec.fetcher.consumerProperties`: the fetcher's source consumer.
    Consumer,
    /// `spec.fetcher.producerProperties`: the fetcher's destination producer.
    Producer,
}

/// Tuning keys every client of a cluster may take.
pub const CONNECTION_KEYS: &[&str] = &[
    "client.id",
    "client.rack",
    "socket.timeout.ms",
    "socket.connection.setup.timeout.ms",
    "socket.send.buffer.bytes",
    "socket.receive.buffer.bytes",
    "socket.keepalive.enable",
    "socket.nagle.disable",
    "reconnect.backoff.ms",
    "reconnect.backoff.max.ms",
    "retry.backoff.ms",
    "retry.backoff.max.ms",
    "metadata.max.age.ms",
    "topic.metadata.refresh.interval.ms",
    "connections.max.idle.ms",
    "broker.address.family",
    "message.max.bytes",
    "receive.message.max.bytes",
    "api.version.request.timeout.ms",
];

/// Tuning keys of the source consumer, besides [`CONNECTION_KEYS`].
pub const CONSUMER_KEYS: &[&str] = &[
    "fetch.wait.max.ms",
    "fetch.min.bytes",
    "fetch.max.bytes",
    "max.partition.fetch.bytes",
    "fetch.error.backoff.ms",
    "fetch.queue.backoff.ms",
    "queued.min.messages",
    "queued.max.messages.kbytes",
];

/// Tuning keys of the destination producer, besides [`CONNECTION_KEYS`].
pub const PRODUCER_KEYS: &[&str] = &[
    "linger.ms",
    "batch.size",
    "batch.num.messages",
    "queue.buffering.max.messages",
    "queue.buffering.max.kbytes",
    "compression.type",
    "compression.level",
];

/// librdkafka's aliases: (alias, the property it sets).
pub const ALIASES: &[(&str, &str)] = &[
    ("metadata.broker.list", "bootstrap.servers"),
    ("queue.buffering.max.ms", "linger.ms"),
    ("compression.codec", "compression.type"),
    ("fetch.message.max.bytes", "max.partition.fetch.bytes"),
    ("max.in.flight", "max.in.flight.requests.per.connection"),
    ("request.required.acks", "acks"),
    ("delivery.timeout.ms", "message.timeout.ms"),
    ("retries", "message.send.max.retries"),
    ("sasl.mechanisms", "sasl.mechanism"),
    ("ssl_key", "ssl.key.pem"),
];

/// Whether a librdkafka property carries secret material (an alias resolved): never accepted
/// inline, never shown.
pub fn is_secret(key: &str) -> bool {
    let key = canonical(key);
    crate::v1alpha1::SECRET_PROPERTIES.contains(&key)
        || key.ends_with(".password")
        || key.ends_with(".secret")
        || (key.ends_with(".pem") && key.contains("key"))
}

/// The property a key sets (an alias resolved).
pub fn canonical(key: &str) -> &str {
    ALIASES
        .iter()
        .find(|(alias, _)| *alias == key)
        .map_or(key, |(_, target)| target)
}

/// The keys `client` may set (aliases of them too, through [`canonical`]).
pub fn allowed_keys(client: Client) -> Vec<&'static str> {
    let mut keys = CONNECTION_KEYS.to_vec();
    match client {
        Client::Connection => {}
        Client::Consumer => keys.extend_from_slice(CONSUMER_KEYS),
        Client::Producer => keys.extend_from_slice(PRODUCER_KEYS),
    }
    keys
}

/// Whether `client` may set `key`.
pub fn allowed(client: Client, key: &str) -> bool {
    allowed_keys(client).contains(&canonical(key))
}

/// Every spelling `client` may set: the keys and the aliases of them (for the CEL rule, which
/// cannot resolve aliases itself).
pub fn allowed_spellings(client: Client) -> Vec<&'static str> {
    let keys = allowed_keys(client);
    let mut all = keys.clone();
    all.extend(
        ALIASES
            .iter()
            .filter(|(_, target)| keys.contains(target))
            .map(|(alias, _)| *alias),
    );
    all
}

/// The CEL rule that admits only the allowed spellings as keys of the map at `path`
/// (relative to `self`).
pub fn cel_rule(client: Client, path: &str) -> String {
    let list = allowed_spellings(client)
        .iter()
        .map(|k| format!("'{k}'"))
        .collect::<Vec<_>>()
        .join(", ");
    format!("!has(self.{path}) || self.{path}.all(k, k in [{list}])")
}

/// The refusal message for `field` (`spec.fetcher.consumerProperties`, …).
pub fn refusal(client: Client, field: &str) -> String {
    format!(
        "{field} takes only tuning keys ({}); connection, security, delivery and secret settings \
         belong to kmirror (use bootstrapServers and the tls/sasl blocks with Secret references)",
        allowed_keys(client).join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tuning_keys_pass_and_operator_owned_ones_do_not() {
        let cases = [
            (Client::Connection, "client.id", true),
            (Client::Connection, "linger.ms", false),
            (Client::Producer, "linger.ms", true),
            (Client::Producer, "queue.buffering.max.ms", true),
            (Client::Consumer, "fetch.message.max.bytes", true),
            (Client::Consumer, "linger.ms", false),
            (Client::Producer, "compression.codec", true),
            // Operator-owned, under any spelling.
            (Client::Connection, "bootstrap.servers", false),
            (Client::Connection, "metadata.broker.list", false),
            (Client::Connection, "security.protocol", false),
            (
                Client::Connection,
                "enable.ssl.certificate.verification",
                false,
            ),
            (
                Client::Connection,
                "ssl.endpoint.identification.algorithm",
                false,
            ),
            (Client::Connection, "sasl.mechanisms", false),
            (Client::Producer, "acks", false),
            (Client::Producer, "request.required.acks", false),
            (Client::Producer, "enable.idempotence", false),
            (Client::Producer, "delivery.timeout.ms", false),
            (Client::Producer, "max.in.flight", false),
            (Client::Consumer, "isolation.level", false),
            (Client::Consumer, "group.id", false),
            // Secrets.
            (Client::Connection, "sasl.password", false),
            (Client::Producer, "ssl.keystore.password", false),
            (Client::Connection, "ssl_key", false),
            (Client::Connection, "debug", false),
        ];
        for (client, key, expected) in cases {
            assert_eq!(allowed(client, key), expected, "{client:?} {key}");
        }
        for (key, secret) in [
            ("sasl.password", true),
            ("ssl_key", true),
            ("ssl.keystore.password", true),
            ("sasl.oauthbearer.client.secret", true),
            ("client.id", false),
            ("ssl.ca.pem", false),
        ] {
            assert_eq!(is_secret(key), secret, "{key}");
        }
    }

    #[test]
    fn the_cel_rule_lists_every_spelling() {
        let rule = cel_rule(Client::Producer, "producerProperties");
        assert!(
            rule.starts_with(
                "!has(self.producerProperties) || self.producerProperties.all(k, k in ["
            )
        );
        for k in ["'linger.ms'", "'queue.buffering.max.ms'", "'client.id'"] {
            assert!(rule.contains(k), "{k} in {rule}");
        }
        assert!(!rule.contains("'acks'"));
        assert!(
            refusal(Client::Consumer, "spec.fetcher.consumerProperties")
                .contains("fetch.wait.max.ms")
        );
    }
}
