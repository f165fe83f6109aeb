//! Kafka client configurations of a fetcher: the source consumer and the destination producer.
//! Tuning defaults yield to the user's properties; what offsets depend on is always forced.

use rdkafka::ClientConfig;

use super::limits::DestinationLimits;
use super::stop::{Side, Stop};
use crate::config::FetcherConfig;
use crate::memory::BufferSizes;

/// A cluster's client configuration from its connection settings.
pub(super) fn cluster_config(config: &FetcherConfig, side: Side) -> Result<ClientConfig, Stop> {
    let settings = match side {
        Side::Source => &config.source,
        Side::Destination => &config.destination,
    };
    settings
        .client_config()
        .map_err(|source| Stop::ReadSettings { side, source })
}

/// The source consumer: assigned partitions, no group offsets, no automatic reset (a position
/// the source no longer has is a finding, not something to jump over).
pub(super) fn source_consumer_config(config: &FetcherConfig) -> Result<ClientConfig, Stop> {
    let mut c = cluster_config(config, Side::Source)?;
    set_default(
        &mut c,
        "group.id",
        &format!("kmirror-fetcher.{}", config.mirror),
    );
    let sizes = buffer_sizes(config);
    set_default(
        &mut c,
        "fetch.max.bytes",
        &sizes.fetch_max_bytes.to_string(),
    );
    set_default(
        &mut c,
        "max.partition.fetch.bytes",
        &sizes.partition_fetch_bytes.to_string(),
    );
    set_default(&mut c, "fetch.wait.max.ms", "100");
    // With small prefetch queues the queue is often full; librdkafka's default 1 s pause before
    // fetching again then halves the throughput (measured: 121 → 214 MB/s for one process of
    // six partitions).
    set_default(&mut c, "fetch.queue.backoff.ms", "10");
    set_default(
        &mut c,
        "queued.max.messages.kbytes",
        &sizes.consumer_queue_kbytes.to_string(),
    );
    c.set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "error")
        .set("isolation.level", config.isolation.as_kafka_str());
    Ok(c)
}

/// The destination producer: idempotent and gapless (a batch that fails for good fails the
/// producer rather than letting later batches land in its place), acknowledged by all in-sync
/// replicas; its batches never exceed the destination topic's `max.message.bytes`, so that only
/// a single record too large for the topic can be refused, and it is the one named.
pub(super) fn producer_config(
    config: &FetcherConfig,
    limits: &DestinationLimits,
) -> Result<ClientConfig, Stop> {
    let mut c = cluster_config(config, Side::Destination)?;
    let sizes = buffer_sizes(config);
    set_default(&mut c, "linger.ms", "5");
    set_default(&mut c, "batch.size", &sizes.batch_size.to_string());
    set_default(&mut c, "batch.num.messages", "10000");
    set_default(&mut c, "compression.type", "lz4");
    set_default(&mut c, "message.max.bytes", "16777216");
    set_default(&mut c, "message.timeout.ms", "300000");
    let number =
        |c: &ClientConfig, key: &str| c.get(key).and_then(|v| v.trim().parse::<i64>().ok());
    if let Some(wanted) = number(&c, "batch.size") {
        c.set("batch.size", limits.batch_size(wanted).to_string());
    }
    // Records the destination accepts must fit the producer's own bound (it refuses larger
    // ones before sending).
    if let (Some(own), Some(limit)) = (number(&c, "message.max.bytes"), limits.max_message_bytes)
        && own < limit + 1024
    {
        c.set(
            "message.max.bytes",
            (limit + 1024).min(1_000_000_000).to_string(),
        );
    }
    // The queue must hold the largest record the producer may send, whatever was asked for.
    let queue = number(&c, "queue.buffering.max.kbytes")
        .map_or(sizes.producer_queue_kbytes, |k| k.max(1) as u64);
    let message_max = number(&c, "message.max.bytes").unwrap_or(0).max(0) as u64;
    c.set(
        "queue.buffering.max.kbytes",
        BufferSizes {
            producer_queue_kbytes: queue,
            ..sizes
        }
        .producer_queue_kbytes_for(message_max)
        .to_string(),
    );
    c.set("enable.idempotence", "true")
        .set("enable.gapless.guarantee", "true")
        .set("acks", "all");
    if config.lease.is_some() {
        // No produce request may outlive the lease's safety margin.
        c.set(
            "request.timeout.ms",
            crate::config::LEASE_REQUEST_TIMEOUT.as_millis().to_string(),
        );
    }
    Ok(c)
}

/// The clients' buffer sizes for this process's budget and partitions.
fn buffer_sizes(config: &FetcherConfig) -> BufferSizes {
    BufferSizes::for_budget(config.memory_budget, config.partitions.len())
}

/// Whether the destination producer compresses its batches.
pub(super) fn producer_compresses(config: &FetcherConfig) -> bool {
    let p = &config.destination.properties;
    let codec = p
        .get("compression.type")
        .or_else(|| p.get("compression.codec"))
        .map_or("lz4", String::as_str);
    codec != "none"
}

fn set_default(c: &mut ClientConfig, key: &str, value: &str) {
    if c.get(key).is_none() {
        c.set(key, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Isolation;
    use kmirror_state::ClusterSettings;

    fn config() -> FetcherConfig {
        let source = ClusterSettings::new("src:9092")
            .with("fetch.wait.max.ms", "500")
            .with("auto.offset.reset", "earliest")
            .with("isolation.level", "read_uncommitted");
        let destination = ClusterSettings::new("dst:9092")
            .with("linger.ms", "50")
            .with("enable.idempotence", "false")
            .with("acks", "1");
        FetcherConfig::new("ns/m", "orders", "orders", vec![0], source, destination)
    }

    #[test]
    fn user_tuning_wins_but_offset_safety_is_forced() {
        let c = config();
        let consumer = source_consumer_config(&c).unwrap();
        // (key, expected value): a user value kept, defaults filled in, safety forced.
        for (key, value) in [
            ("bootstrap.servers", "src:9092"),
            ("fetch.wait.max.ms", "500"),
            ("group.id", "kmirror-fetcher.ns/m"),
            // The default 96 MiB budget: a quarter of its 33.5 MiB of buffers.
            ("fetch.max.bytes", "8781824"),
            ("queued.max.messages.kbytes", "8576"),
            ("fetch.queue.backoff.ms", "10"),
            ("enable.auto.commit", "false"),
            ("enable.auto.offset.store", "false"),
            ("auto.offset.reset", "error"),
            ("isolation.level", "read_committed"),
        ] {
            assert_eq!(consumer.get(key), Some(value), "consumer {key}");
        }
        let producer = producer_config(&c, &DestinationLimits::default()).unwrap();
        for (key, value) in [
            ("bootstrap.servers", "dst:9092"),
            ("linger.ms", "50"),
            ("compression.type", "lz4"),
            ("message.timeout.ms", "300000"),
            ("enable.idempotence", "true"),
            ("enable.gapless.guarantee", "true"),
            ("acks", "all"),
            ("batch.size", "1000000"),
            ("message.max.bytes", "16777216"),
            // 12.6 MiB from the budget, raised to hold one 16 MiB record.
            ("queue.buffering.max.kbytes", "17408"),
        ] {
            assert_eq!(producer.get(key), Some(value), "producer {key}");
        }
        assert!(producer_compresses(&c));
    }

    /// Limits of a destination topic whose `max.message.bytes` is `bytes`.
    fn topic_limit(bytes: i64) -> DestinationLimits {
        DestinationLimits {
            max_message_bytes: Some(bytes),
            ..Default::default()
        }
    }

    #[test]
    fn batches_fit_the_destination_topic() {
        let mut c = config();
        c.destination
            .properties
            .insert("compression.type".into(), "none".into());
        c.destination
            .properties
            .insert("enable.gapless.guarantee".into(), "false".into());
        let small = topic_limit(200_000);
        let p = producer_config(&c, &small).unwrap();
        assert_eq!(p.get("batch.size"), Some("199878"));
        assert_eq!(p.get("message.max.bytes"), Some("16777216"));
        assert_eq!(p.get("enable.gapless.guarantee"), Some("true"), "forced");
        let huge = topic_limit(50_000_000);
        let p = producer_config(&c, &huge).unwrap();
        assert_eq!(p.get("batch.size"), Some("1000000"));
        assert_eq!(p.get("message.max.bytes"), Some("50001024"));
        assert!(!producer_compresses(&c));
    }

    #[test]
    fn buffers_follow_the_budget_and_never_refuse_the_largest_record() {
        let mut c = config();
        c.memory_budget = 256 << 20;
        c.partitions = vec![0, 1, 2, 3];
        let consumer = source_consumer_config(&c).unwrap();
        assert_eq!(consumer.get("fetch.max.bytes"), Some("29360128"));
        assert_eq!(consumer.get("max.partition.fetch.bytes"), Some("7340032"));
        let producer = producer_config(&c, &DestinationLimits::default()).unwrap();
        assert_eq!(producer.get("queue.buffering.max.kbytes"), Some("43008"));
        // A user's queue smaller than a record the topic accepts is raised; a larger one kept.
        c.destination
            .properties
            .insert("queue.buffering.max.kbytes".into(), "1024".into());
        let huge = topic_limit(50_000_000);
        let p = producer_config(&c, &huge).unwrap();
        assert_eq!(p.get("queue.buffering.max.kbytes"), Some("49854"));
        c.destination
            .properties
            .insert("queue.buffering.max.kbytes".into(), "500000".into());
        let p = producer_config(&c, &huge).unwrap();
        assert_eq!(p.get("queue.buffering.max.kbytes"), Some("500000"));
    }

    #[test]
    fn isolation_follows_the_configuration() {
        let mut c = config();
        c.isolation = Isolation::ReadUncommitted;
        let consumer = source_consumer_config(&c).unwrap();
        assert_eq!(consumer.get("isolation.level"), Some("read_uncommitted"));
    }

    #[test]
    fn unreadable_settings_name_the_side() {
        let mut c = config();
        c.destination.property_files.insert(
            "sasl.password".into(),
            "/nonexistent/kmirror/password".into(),
        );
        let stop = producer_config(&c, &DestinationLimits::default()).unwrap_err();
        assert!(matches!(
            stop,
            Stop::ReadSettings {
                side: Side::Destination,
                ..
            }
        ));
        assert!(source_consumer_config(&c).is_ok());
    }
}
