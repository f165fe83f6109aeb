//! rdkafka client configurations for every listener and principal of the test bed, and small
//! helpers tests share (unique names, topic creation).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};

use crate::Testbed;

/// Who connects to the destination cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DestUser {
    /// Super user.
    Admin,
    /// The principal fetchers use.
    Mirror,
    /// An application principal with no ACLs unless a test creates them.
    App,
}

impl DestUser {
    fn credentials(self, bed: &Testbed) -> (&str, &str) {
        match self {
            DestUser::Admin => (
                bed.var("KMIRROR_ADMIN_USER"),
                bed.var("KMIRROR_ADMIN_PASSWORD"),
            ),
            DestUser::Mirror => (
                bed.var("KMIRROR_MIRROR_USER"),
                bed.var("KMIRROR_MIRROR_PASSWORD"),
            ),
            DestUser::App => (bed.var("KMIRROR_APP_USER"), bed.var("KMIRROR_APP_PASSWORD")),
        }
    }
}

impl Testbed {
    /// Source cluster over PLAINTEXT.
    pub fn source_config(&self) -> ClientConfig {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", self.source_bootstrap());
        c
    }

    /// Source cluster over SASL_SSL with SCRAM-SHA-512, verifying the bed's CA.
    pub fn source_sasl_ssl_config(&self) -> ClientConfig {
        let mut c = ClientConfig::new();
        c.set(
            "bootstrap.servers",
            self.var("KMIRROR_SOURCE_SASL_SSL_BOOTSTRAP"),
        )
        .set("security.protocol", "SASL_SSL")
        .set("sasl.mechanism", "SCRAM-SHA-512")
        .set("sasl.username", self.var("KMIRROR_ADMIN_USER"))
        .set("sasl.password", self.var("KMIRROR_ADMIN_PASSWORD"))
        .set("ssl.ca.location", self.var("KMIRROR_CA"))
        .set("ssl.endpoint.identification.algorithm", "https");
        c
    }

    /// Source cluster over mutual TLS with the bed's client certificate.
    pub fn source_mtls_config(&self) -> ClientConfig {
        let mut c = ClientConfig::new();
        c.set(
            "bootstrap.servers",
            self.var("KMIRROR_SOURCE_MTLS_BOOTSTRAP"),
        )
        .set("security.protocol", "SSL")
        .set("ssl.ca.location", self.var("KMIRROR_CA"))
        .set("ssl.certificate.location", self.var("KMIRROR_CLIENT_CERT"))
        .set("ssl.key.location", self.var("KMIRROR_CLIENT_KEY"));
        c
    }

    /// Destination cluster over SASL_PLAINTEXT with the given user and mechanism
    /// (`PLAIN`, `SCRAM-SHA-256` or `SCRAM-SHA-512`).
    pub fn dest_config_with(&self, user: DestUser, mechanism: &str) -> ClientConfig {
        let (name, password) = user.credentials(self);
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", self.dest_bootstrap())
            .set("security.protocol", "SASL_PLAINTEXT")
            .set("sasl.mechanism", mechanism)
            .set("sasl.username", name)
            .set("sasl.password", password);
        c
    }

    /// Destination cluster over SASL PLAIN.
    pub fn dest_config(&self, user: DestUser) -> ClientConfig {
        self.dest_config_with(user, "PLAIN")
    }

    /// Destination cluster over SASL/OAUTHBEARER: tokens from the bed's OAuth token endpoint
    /// (client credentials), whose subject is the principal. `Admin` has no OAuth client.
    pub fn dest_oauth_config(&self, user: DestUser) -> ClientConfig {
        let (id, secret) = match user {
            DestUser::Mirror => (
                self.var("KMIRROR_OIDC_MIRROR_CLIENT_ID"),
                self.var("KMIRROR_OIDC_MIRROR_CLIENT_SECRET"),
            ),
            DestUser::App => (
                self.var("KMIRROR_OIDC_APP_CLIENT_ID"),
                self.var("KMIRROR_OIDC_APP_CLIENT_SECRET"),
            ),
            DestUser::Admin => panic!("the test bed has no OAuth client for admin"),
        };
        let mut c = ClientConfig::new();
        c.set(
            "bootstrap.servers",
            self.var("KMIRROR_DEST_OAUTH_BOOTSTRAP"),
        )
        .set("security.protocol", "SASL_PLAINTEXT")
        .set("sasl.mechanism", "OAUTHBEARER")
        .set("sasl.oauthbearer.method", "oidc")
        .set(
            "sasl.oauthbearer.token.endpoint.url",
            self.var("KMIRROR_OIDC_TOKEN_URL"),
        )
        .set("sasl.oauthbearer.client.id", id)
        .set("sasl.oauthbearer.client.secret", secret);
        c
    }
}

/// A topic (or group) name unique within this test process and across runs.
pub fn unique_name(prefix: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis()
        % 100_000_000;
    format!("{prefix}-{t}-{}-{n}", std::process::id())
}

/// Creates a topic with replication factor 1 and the given configs, waiting for the result.
pub async fn create_topic(
    config: &ClientConfig,
    name: &str,
    partitions: i32,
    configs: &[(&str, &str)],
) -> anyhow::Result<()> {
    let admin: AdminClient<DefaultClientContext> = config.create()?;
    let mut topic = NewTopic::new(name, partitions, TopicReplication::Fixed(1));
    for (k, v) in configs {
        topic = topic.set(k, v);
    }
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    for result in admin.create_topics([&topic], &opts).await? {
        result.map_err(|(t, e)| anyhow::anyhow!("creating topic {t}: {e}"))?;
    }
    Ok(())
}

/// A record for tests: key, value, headers.
#[derive(Debug, Clone)]
pub struct TestRecord {
    /// Partition to write to.
    pub partition: i32,
    /// Key.
    pub key: Option<Vec<u8>>,
    /// Value.
    pub value: Option<Vec<u8>>,
    /// Headers.
    pub headers: Vec<(String, Vec<u8>)>,
}

/// Deterministic pseudo-random numbers (xorshift), so failures reproduce.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// Seeded generator.
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }
    /// Next value.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    /// Uniform in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

/// `count` records over `partitions` partitions with keys, headers and mixed sizes: mostly
/// 10 B–4 KiB values, some tombstones and null keys, and `large` records of ~1 MB.
pub fn mixed_records(count: usize, partitions: i32, large: usize, seed: u64) -> Vec<TestRecord> {
    let mut rng = Rng::new(seed);
    let words = [
        "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel",
    ];
    let text = |len: usize, rng: &mut Rng| -> Vec<u8> {
        let mut v = Vec::with_capacity(len + 8);
        while v.len() < len {
            v.extend_from_slice(words[rng.below(words.len() as u64) as usize].as_bytes());
            v.push(b' ');
            v.extend_from_slice(rng.below(1_000_000).to_string().as_bytes());
            v.push(b' ');
        }
        v.truncate(len);
        v
    };
    (0..count)
        .map(|i| {
            let partition = (i as i32) % partitions;
            let key = if i % 50 == 7 {
                None
            } else {
                Some(format!("key-{}", rng.below(10_000)).into_bytes())
            };
            let value = if i % 97 == 3 {
                None
            } else if i < large {
                Some(text(1_000_000 - rng.below(2_000) as usize, &mut rng))
            } else {
                let len = match rng.below(10) {
                    0 => rng.below(10) as usize,
                    1..=7 => 10 + rng.below(500) as usize,
                    _ => 500 + rng.below(3600) as usize,
                };
                Some(text(len, &mut rng))
            };
            let headers = (0..rng.below(4))
                .map(|h| (format!("h{h}"), format!("v{}", rng.below(100)).into_bytes()))
                .collect();
            TestRecord {
                partition,
                key,
                value,
                headers,
            }
        })
        .collect()
}

#[derive(Default)]
struct CountingContext {
    delivered: AtomicU32,
    failed: std::sync::Mutex<Option<String>>,
}

impl rdkafka::ClientContext for CountingContext {}

impl rdkafka::producer::ProducerContext for CountingContext {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &rdkafka::message::DeliveryResult<'_>, _: ()) {
        match result {
            Ok(_) => {
                self.delivered.fetch_add(1, Ordering::Relaxed);
            }
            Err((e, _)) => *self.failed.lock().unwrap() = Some(e.to_string()),
        }
    }
}

/// Produces records as fast as the cluster takes them (idempotent, acks=all) and waits for all
/// deliveries. `extra` sets producer properties (e.g. `compression.type`).
pub fn produce_all(
    config: &ClientConfig,
    topic: &str,
    records: &[TestRecord],
    extra: &[(&str, &str)],
) -> anyhow::Result<()> {
    use rdkafka::message::{Header, OwnedHeaders};
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    let mut c = config.clone();
    c.set("enable.idempotence", "true")
        .set("linger.ms", "10")
        .set("message.max.bytes", "2000000")
        .set("batch.size", "1000000");
    for (k, v) in extra {
        c.set(*k, *v);
    }
    let producer: BaseProducer<CountingContext> =
        c.create_with_context(CountingContext::default())?;
    for r in records {
        let headers = r.headers.iter().fold(OwnedHeaders::new(), |h, (k, v)| {
            h.insert(Header {
                key: k,
                value: Some(v.as_slice()),
            })
        });
        let mut record = BaseRecord::<[u8], [u8]>::to(topic)
            .partition(r.partition)
            .headers(headers);
        if let Some(k) = &r.key {
            record = record.key(k.as_slice());
        }
        if let Some(v) = &r.value {
            record = record.payload(v.as_slice());
        }
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((
                    rdkafka::error::KafkaError::MessageProduction(
                        rdkafka::types::RDKafkaErrorCode::QueueFull,
                    ),
                    back,
                )) => {
                    record = back;
                    producer.poll(Duration::from_millis(20));
                }
                Err((e, _)) => anyhow::bail!("producing to {topic}: {e}"),
            }
        }
        producer.poll(Duration::ZERO);
    }
    producer.flush(Duration::from_secs(120))?;
    if let Some(e) = producer.context().failed.lock().unwrap().take() {
        anyhow::bail!("a record was not delivered to {topic}: {e}");
    }
    anyhow::ensure!(
        producer.context().delivered.load(Ordering::Relaxed) as usize == records.len(),
        "not every record was delivered to {topic}"
    );
    Ok(())
}

/// Produces `(value, timestamp)` records with key `k` to partition 0, in order, waiting for every
/// delivery (idempotent, records up to 4 MB).
pub fn produce_with_timestamps(config: &ClientConfig, topic: &str, records: &[(Vec<u8>, i64)]) {
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    let producer: BaseProducer = config
        .clone()
        .set("enable.idempotence", "true")
        .set("message.max.bytes", "4000000")
        .create()
        .expect("producer");
    for (value, ts) in records {
        producer
            .send(
                BaseRecord::<[u8], [u8]>::to(topic)
                    .partition(0)
                    .key(b"k".as_slice())
                    .payload(value.as_slice())
                    .timestamp(*ts),
            )
            .map_err(|(e, _)| e)
            .expect("send");
        producer.poll(Duration::ZERO);
    }
    producer.flush(Duration::from_secs(60)).expect("flush");
}

/// (log start, log end) of a partition. A broker that does not lead the partition yet (a topic
/// created a moment ago, a leader moving) is asked again for up to 15 s: that is the broker
/// settling, not an answer.
pub fn watermarks(
    config: &ClientConfig,
    topic: &str,
    partition: i32,
) -> anyhow::Result<(i64, i64)> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::types::RDKafkaErrorCode;
    let consumer: BaseConsumer = config
        .clone()
        .set("group.id", "kmirror-e2e-watermarks")
        .create()?;
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        match consumer.fetch_watermarks(topic, partition, Duration::from_secs(15)) {
            Err(e)
                if matches!(
                    e.rdkafka_error_code(),
                    Some(
                        RDKafkaErrorCode::NotLeaderForPartition
                            | RDKafkaErrorCode::LeaderNotAvailable
                    )
                ) && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(200));
            }
            answer => return Ok(answer?),
        }
    }
}

/// Deletes records of a partition below `before`.
pub async fn delete_records(
    config: &ClientConfig,
    topic: &str,
    partition: i32,
    before: i64,
) -> anyhow::Result<()> {
    let admin: AdminClient<DefaultClientContext> = config.create()?;
    let mut tpl = rdkafka::TopicPartitionList::new();
    tpl.add_partition_offset(topic, partition, rdkafka::Offset::Offset(before))?;
    admin
        .delete_records(
            &tpl,
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(30))),
        )
        .await?;
    Ok(())
}

/// Deletes a topic.
pub async fn delete_topic(config: &ClientConfig, topic: &str) -> anyhow::Result<()> {
    let admin: AdminClient<DefaultClientContext> = config.create()?;
    for r in admin
        .delete_topics(
            &[topic],
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(30))),
        )
        .await?
    {
        r.map_err(|(t, e)| anyhow::anyhow!("deleting topic {t}: {e}"))?;
    }
    Ok(())
}

/// Reads every record of a partition from its start to its current end.
pub fn read_all(
    config: &ClientConfig,
    topic: &str,
    partition: i32,
    isolation: &str,
) -> anyhow::Result<Vec<kmirror_state::kafka_record::RecordData>> {
    use rdkafka::Message;
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let (low, high) = watermarks(config, topic, partition)?;
    let consumer: BaseConsumer<kmirror_state::quiet::QuietEof> = config
        .clone()
        .set("group.id", "kmirror-e2e-reader")
        .set("enable.auto.commit", "false")
        .set("isolation.level", isolation)
        .set("enable.partition.eof", "true")
        .create_with_context(kmirror_state::quiet::QuietEof)?;
    let mut tpl = rdkafka::TopicPartitionList::new();
    tpl.add_partition_offset(topic, partition, rdkafka::Offset::Offset(low))?;
    consumer.assign(&tpl)?;
    let mut out = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while std::time::Instant::now() < deadline {
        match consumer.poll(Duration::from_millis(500)) {
            None => continue,
            Some(Err(rdkafka::error::KafkaError::PartitionEOF(_))) => {
                let pos = consumer.position()?.elements().first().map(|e| e.offset());
                if matches!(pos, Some(rdkafka::Offset::Offset(o)) if o >= high) || high == low {
                    return Ok(out);
                }
            }
            Some(Err(e)) => return Err(e.into()),
            Some(Ok(m)) => {
                let done = m.offset() + 1 >= high;
                out.push(kmirror_state::kafka_record::RecordData::from_message(&m));
                if done {
                    return Ok(out);
                }
            }
        }
    }
    anyhow::bail!("reading {topic}[{partition}] did not finish")
}

/// Dynamic configs set on a topic.
pub async fn topic_configs(
    config: &ClientConfig,
    topic: &str,
) -> anyhow::Result<std::collections::BTreeMap<String, String>> {
    use rdkafka::admin::{ConfigSource, ResourceSpecifier};
    let admin: AdminClient<DefaultClientContext> = config.create()?;
    let mut out = std::collections::BTreeMap::new();
    for r in admin
        .describe_configs([&ResourceSpecifier::Topic(topic)], &AdminOptions::new())
        .await?
    {
        let r = r.map_err(|e| anyhow::anyhow!("{e:?}"))?;
        for e in r.entries {
            if e.source == ConfigSource::DynamicTopic
                && let Some(v) = e.value
            {
                out.insert(e.name, v);
            }
        }
    }
    Ok(out)
}

/// An ALLOW binding for the bed's application principal (`User:app`) on a literal resource.
pub fn app_acl(
    resource_type: kmirror_state::kafka_admin::ResourceType,
    name: &str,
    operation: kmirror_state::kafka_admin::Operation,
) -> kmirror_state::kafka_admin::AclBinding {
    use kmirror_state::kafka_admin::{AclBinding, PatternType, Permission};
    AclBinding {
        resource_type,
        name: name.into(),
        pattern: PatternType::Literal,
        principal: "User:app".into(),
        host: "*".into(),
        operation,
        permission: Permission::Allow,
    }
}

/// Whether `User:app` holds `operation` on `topic` on the cluster of `config` (a failed
/// describe counts as no).
pub fn app_may(
    config: &ClientConfig,
    topic: &str,
    operation: kmirror_state::kafka_admin::Operation,
) -> bool {
    let admin: rdkafka::admin::AdminClient<rdkafka::client::DefaultClientContext> =
        config.create().expect("admin client");
    let binding = kmirror_state::kafka_admin::AclBinding {
        operation,
        ..app_acls(topic, "-").remove(0)
    };
    kmirror_state::kafka_admin::describe_acls(admin.inner(), &binding, Duration::from_secs(10))
        .is_ok_and(|b| !b.is_empty())
}

/// What the bed's application principal (`User:app`, [`DestUser::App`]) may do on a source
/// topic and group: read, write and describe the topic, read the group. Created on the source,
/// these are the bindings kmirror copies (WRITE withheld while the topic mirrors).
pub fn app_acls(topic: &str, group: &str) -> Vec<kmirror_state::kafka_admin::AclBinding> {
    use kmirror_state::kafka_admin::{Operation, ResourceType};
    vec![
        app_acl(ResourceType::Topic, topic, Operation::Read),
        app_acl(ResourceType::Topic, topic, Operation::Write),
        app_acl(ResourceType::Topic, topic, Operation::Describe),
        app_acl(ResourceType::Group, group, Operation::Read),
    ]
}

/// Consumes `count` records per partition from the start in `group` and commits; returns the
/// committed offsets.
pub fn consume_and_commit(
    config: &ClientConfig,
    topic: &str,
    group: &str,
    partitions: i32,
    count: i64,
) -> BTreeMap<i32, i64> {
    let consumer: BaseConsumer = config
        .clone()
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, Offset::Beginning)
            .unwrap();
    }
    consumer.assign(&tpl).unwrap();
    let mut next: BTreeMap<i32, i64> = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while (0..partitions).any(|p| next.get(&p).copied().unwrap_or(0) < count) {
        assert!(
            Instant::now() < deadline,
            "could not consume {count} records per partition"
        );
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(200))
            && next.get(&m.partition()).copied().unwrap_or(0) < count
        {
            next.insert(m.partition(), m.offset() + 1);
        }
    }
    let mut commit = TopicPartitionList::new();
    for (p, o) in &next {
        commit
            .add_partition_offset(topic, *p, Offset::Offset(*o))
            .unwrap();
    }
    consumer.commit(&commit, CommitMode::Sync).unwrap();
    next
}

/// The offsets `group` has committed for `partitions` of `topic` (-1: none).
pub fn committed_offsets(
    config: &ClientConfig,
    group: &str,
    topic: &str,
    partitions: i32,
) -> BTreeMap<i32, i64> {
    let consumer: BaseConsumer = config
        .clone()
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition(topic, p);
    }
    let committed = consumer
        .committed_offsets(tpl, Duration::from_secs(15))
        .expect("committed offsets");
    (0..partitions)
        .map(|p| {
            let offset = committed
                .find_partition(topic, p)
                .and_then(|e| e.offset().to_raw())
                .filter(|o| *o >= 0)
                .unwrap_or(-1);
            (p, offset)
        })
        .collect()
}
