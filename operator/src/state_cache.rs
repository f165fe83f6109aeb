//! The operator's view of the state topic: a background reader tails it into memory, so that
//! reconciles read partition states and fetcher positions without touching Kafka, and the
//! operator's own transitions are written through (durable first, then visible locally).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use kmirror_state::quiet::QuietEof;
use kmirror_state::records::{PartitionRecords, PartitionStateRecord, RecordKind, StateKey};
use kmirror_state::store::{StateWriter, UnitId, ensure_state_topic};
use prometheus_client::metrics::gauge::Gauge;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};
use tokio::sync::Notify;

use crate::error::StateError;
use crate::metrics::{Metrics, StateTopicLabels};

/// Result of a state-topic operation.
pub type Result<T> = std::result::Result<T, StateError>;

/// One state topic, mirrored in memory.
pub struct StateCache {
    topic: String,
    units: RwLock<BTreeMap<UnitId, PartitionRecords>>,
    loaded: AtomicBool,
    stop: Arc<AtomicBool>,
    writer: Mutex<StateWriter>,
    /// Notified whenever records arrive (positions move).
    pub changed: Notify,
    /// `kmirror_operator_state_topic_available` of this topic.
    available: Availability,
}

/// Whether every state topic of one name (one per destination cluster) answers, published as
/// the gauge `kmirror_operator_state_topic_available{state_topic}`: 1 while all of them do.
#[derive(Default)]
pub struct TopicHealth {
    gauge: Gauge,
    caches: Mutex<HashMap<u64, bool>>,
}

impl TopicHealth {
    fn set(&self, cache: u64, ok: bool) {
        let mut caches = self.caches.lock().unwrap_or_else(|p| p.into_inner());
        caches.insert(cache, ok);
        self.gauge.set(i64::from(caches.values().all(|ok| *ok)));
    }
}

/// Whether one state topic answers: the reader's last probe, and the last write.
struct Availability {
    health: Arc<TopicHealth>,
    cache: u64,
    read_ok: AtomicBool,
    write_ok: AtomicBool,
}

impl Availability {
    fn publish(&self) {
        let ok = self.read_ok.load(Ordering::Relaxed) && self.write_ok.load(Ordering::Relaxed);
        self.health.set(self.cache, ok);
    }

    fn read(&self, ok: bool) {
        self.read_ok.store(ok, Ordering::Relaxed);
        self.publish();
    }

    fn wrote(&self, ok: bool) {
        self.write_ok.store(ok, Ordering::Relaxed);
        self.publish();
    }
}

/// How often the reader checks that the state topic still answers.
const PROBE_INTERVAL: Duration = Duration::from_secs(10);

impl Drop for StateCache {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

impl StateCache {
    /// Ensures the topic and starts tailing it from the beginning; whether it answers goes to
    /// `health` (as cache `cache`).
    pub fn start(
        config: &ClientConfig,
        topic: &str,
        health: Arc<TopicHealth>,
        cache: u64,
    ) -> Result<Arc<StateCache>> {
        if let Err(e) = ensure_state_topic(config, topic) {
            health.set(cache, false);
            return Err(StateError(e.to_string()));
        }
        let writer = StateWriter::new(config, topic).map_err(|e| StateError(e.to_string()))?;
        let cache = Arc::new(StateCache {
            topic: topic.to_string(),
            units: RwLock::new(BTreeMap::new()),
            loaded: AtomicBool::new(false),
            stop: Arc::new(AtomicBool::new(false)),
            writer: Mutex::new(writer),
            changed: Notify::new(),
            available: Availability {
                health,
                cache,
                read_ok: AtomicBool::new(false),
                write_ok: AtomicBool::new(true),
            },
        });
        let consumer: BaseConsumer<QuietEof> = config
            .clone()
            .set("group.id", "kmirror-operator-state")
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("enable.partition.eof", "true")
            .set("fetch.wait.max.ms", "100")
            .create_with_context(QuietEof)
            .map_err(|e| StateError(e.to_string()))?;
        let weak = Arc::downgrade(&cache);
        let stop = cache.stop.clone();
        let topic = topic.to_string();
        std::thread::Builder::new()
            .name(format!("state-{topic}"))
            .spawn(move || tail(consumer, &topic, weak, stop))
            .map_err(|e| StateError(e.to_string()))?;
        Ok(cache)
    }

    /// The state topic's name.
    pub fn topic_name(&self) -> &str {
        &self.topic
    }

    /// Whether the topic answered the last read probe and took the last write.
    pub fn available(&self) -> bool {
        self.available.read_ok.load(Ordering::Relaxed)
            && self.available.write_ok.load(Ordering::Relaxed)
    }

    /// The whole topic has been read once.
    pub fn loaded(&self) -> bool {
        self.loaded.load(Ordering::Relaxed)
    }

    /// Waits (bounded) until the first full read is done.
    pub async fn wait_loaded(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while !self.loaded() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.loaded()
    }

    /// Records of every partition of `topic` in `mirror`.
    pub fn topic(&self, mirror: &str, topic: &str) -> BTreeMap<i32, PartitionRecords> {
        self.units
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|((m, t, p), _)| m == mirror && t == topic && *p >= 0)
            .map(|((_, _, p), r)| (*p, r.clone()))
            .collect()
    }

    /// The lifecycle record of every partition of every topic of `mirror` (maps and positions
    /// are not copied).
    pub fn states(&self, mirror: &str) -> BTreeMap<(String, i32), Option<PartitionStateRecord>> {
        self.units
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|((m, _, p), _)| m == mirror && *p >= 0)
            .map(|((_, t, p), r)| ((t.clone(), *p), r.state.clone()))
            .collect()
    }

    fn apply(&self, key: &StateKey, value: Option<&[u8]>) {
        let mut units = self.units.write().unwrap_or_else(|p| p.into_inner());
        let unit = (key.mirror.clone(), key.topic.clone(), key.partition);
        let records = units.entry(unit.clone()).or_default();
        if let Err(e) = records.apply(key, value) {
            tracing::warn!(topic = %self.topic, error = %e, "ignoring an unreadable state record");
        }
        if records.state.is_none()
            && records.position.is_none()
            && records.chunks.is_empty()
            && records.acls.is_none()
            && records.source_acls.is_none()
        {
            units.remove(&unit);
        }
    }

    /// Persists lifecycle records of partitions of `topic` (waits for the broker), then applies
    /// them locally.
    pub async fn write_states(
        self: &Arc<Self>,
        mirror: &str,
        topic: &str,
        records: Vec<(i32, PartitionStateRecord)>,
    ) -> Result<()> {
        let batch = records
            .into_iter()
            .map(|(p, r)| {
                (
                    StateKey::new(RecordKind::State, mirror, topic, p),
                    Some(serde_json::to_vec(&r).expect("state records serialize")),
                )
            })
            .collect();
        self.write(batch).await
    }

    /// The ACL bindings kmirror created for `mirror`.
    pub fn acls(&self, mirror: &str) -> Vec<kmirror_state::kafka_admin::AclBinding> {
        let units = self.units.read().unwrap_or_else(|p| p.into_inner());
        units
            .get(&(mirror.to_string(), String::new(), -1))
            .and_then(|r| r.acls.clone())
            .unwrap_or_default()
    }

    /// Records the ACL bindings kmirror created for `mirror`.
    pub async fn write_acls(
        self: &Arc<Self>,
        mirror: &str,
        acls: &[kmirror_state::kafka_admin::AclBinding],
    ) -> Result<()> {
        let value = serde_json::to_vec(acls).expect("bindings serialize");
        self.write(vec![(StateKey::acls(mirror), Some(value))])
            .await
    }

    /// The source ACL bindings the last ACL sync of `mirror` read (None: never synced).
    pub fn source_acls(&self, mirror: &str) -> Option<Vec<kmirror_state::kafka_admin::AclBinding>> {
        let units = self.units.read().unwrap_or_else(|p| p.into_inner());
        units
            .get(&(mirror.to_string(), String::new(), -1))
            .and_then(|r| r.source_acls.clone())
    }

    /// Records the source ACL bindings an ACL sync of `mirror` read.
    pub async fn write_source_acls(
        self: &Arc<Self>,
        mirror: &str,
        acls: &[kmirror_state::kafka_admin::AclBinding],
    ) -> Result<()> {
        let value = serde_json::to_vec(acls).expect("bindings serialize");
        self.write(vec![(StateKey::source_acls(mirror), Some(value))])
            .await
    }

    /// Writes tombstones for the given keys.
    pub async fn delete(self: &Arc<Self>, keys: Vec<StateKey>) -> Result<()> {
        self.write(keys.into_iter().map(|k| (k, None)).collect())
            .await
    }

    /// Writes raw records (key, serialized value or tombstone), durable before they apply locally.
    pub async fn write_records(
        self: &Arc<Self>,
        batch: Vec<(StateKey, Option<Vec<u8>>)>,
    ) -> Result<()> {
        self.write(batch).await
    }

    async fn write(self: &Arc<Self>, batch: Vec<(StateKey, Option<Vec<u8>>)>) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        let me = self.clone();
        let sent = batch.clone();
        let written = tokio::task::spawn_blocking(move || {
            let writer = me.writer.lock().unwrap_or_else(|p| p.into_inner());
            for (k, v) in &sent {
                writer.send_raw(k, v.as_deref())?;
            }
            writer.flush(Duration::from_secs(15))
        })
        .await
        .map_err(|e| StateError(e.to_string()))?;
        self.available.wrote(written.is_ok());
        written.map_err(|e| StateError(e.to_string()))?;
        for (k, v) in &batch {
            self.apply(k, v.as_deref());
        }
        Ok(())
    }
}

fn tail(
    consumer: BaseConsumer<QuietEof>,
    topic: &str,
    cache: std::sync::Weak<StateCache>,
    stop: Arc<AtomicBool>,
) {
    let mut ends: HashMap<i32, i64> = HashMap::new();
    loop {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        match consumer.fetch_metadata(Some(topic), Duration::from_secs(10)) {
            Ok(md) => {
                let partitions: Vec<i32> = md
                    .topics()
                    .first()
                    .map(|t| t.partitions().iter().map(|p| p.id()).collect())
                    .unwrap_or_default();
                if !partitions.is_empty() {
                    let mut tpl = TopicPartitionList::new();
                    for p in &partitions {
                        if let Ok((low, high)) =
                            consumer.fetch_watermarks(topic, *p, Duration::from_secs(10))
                        {
                            if high > low {
                                ends.insert(*p, high);
                            }
                            let _ = tpl.add_partition_offset(topic, *p, Offset::Offset(low));
                        }
                    }
                    if consumer.assign(&tpl).is_ok() {
                        break;
                    }
                }
            }
            Err(e) => {
                if let Some(c) = cache.upgrade() {
                    c.available.read(false);
                }
                tracing::warn!(%topic, error = %e, "state topic metadata unavailable; retrying")
            }
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    if let Some(c) = cache.upgrade() {
        c.available.read(true);
    }
    let mut probed = Instant::now();
    if ends.is_empty()
        && let Some(c) = cache.upgrade()
    {
        c.loaded.store(true, Ordering::Relaxed);
    }
    while !stop.load(Ordering::Relaxed) {
        let Some(cache) = cache.upgrade() else { return };
        if probed.elapsed() >= PROBE_INTERVAL {
            probed = Instant::now();
            let answer = consumer.fetch_watermarks(topic, 0, Duration::from_secs(5));
            if let Err(e) = &answer {
                tracing::warn!(%topic, error = %e, "the state topic does not answer");
            }
            cache.available.read(answer.is_ok());
        }
        match consumer.poll(Duration::from_millis(200)) {
            None => {}
            Some(Err(rdkafka::error::KafkaError::PartitionEOF(p))) => {
                ends.remove(&p);
                if ends.is_empty() && !cache.loaded() {
                    cache.loaded.store(true, Ordering::Relaxed);
                    cache.changed.notify_waiters();
                }
            }
            Some(Err(e)) => {
                tracing::debug!(%topic, error = %e, "state topic read error");
            }
            Some(Ok(m)) => {
                if let Some(key) = m.key().and_then(StateKey::parse) {
                    cache.apply(&key, m.payload());
                    if key.kind == RecordKind::Position {
                        cache.changed.notify_waiters();
                    }
                }
                if let Some(&end) = ends.get(&m.partition())
                    && m.offset() + 1 >= end
                {
                    ends.remove(&m.partition());
                    if ends.is_empty() {
                        cache.loaded.store(true, Ordering::Relaxed);
                        cache.changed.notify_waiters();
                    }
                }
            }
        }
    }
}

/// State caches by (destination configuration, topic).
#[derive(Default)]
pub struct StateCaches {
    caches: Mutex<HashMap<(u64, String), Arc<StateCache>>>,
    health: Mutex<HashMap<String, Arc<TopicHealth>>>,
}

impl StateCaches {
    /// The cache of `topic` on the destination identified by `key` (its configuration hash);
    /// its availability goes to `metrics`.
    pub async fn get(
        &self,
        key: u64,
        config: &ClientConfig,
        topic: &str,
        metrics: &Metrics,
    ) -> Result<Arc<StateCache>> {
        if let Some(c) = self
            .caches
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&(key, topic.to_string()))
        {
            return Ok(c.clone());
        }
        let health = self
            .health
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(topic.to_string())
            .or_insert_with(|| {
                Arc::new(TopicHealth {
                    gauge: metrics
                        .state_topic_available
                        .get_or_create_owned(&StateTopicLabels {
                            state_topic: topic.to_string(),
                        }),
                    caches: Mutex::default(),
                })
            })
            .clone();
        let (config, t) = (config.clone(), topic.to_string());
        let cache =
            tokio::task::spawn_blocking(move || StateCache::start(&config, &t, health, key))
                .await
                .map_err(|e| StateError(e.to_string()))??;
        let mut caches = self.caches.lock().unwrap_or_else(|p| p.into_inner());
        Ok(caches
            .entry((key, topic.to_string()))
            .or_insert(cache)
            .clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_topic_name_is_available_while_every_cluster_answers() {
        let health = TopicHealth::default();
        health.set(1, true);
        assert_eq!(health.gauge.get(), 1);
        health.set(2, false);
        assert_eq!(health.gauge.get(), 0, "one cluster's copy does not answer");
        health.set(2, true);
        assert_eq!(health.gauge.get(), 1);
        let a = Availability {
            health: Arc::new(TopicHealth::default()),
            cache: 7,
            read_ok: AtomicBool::new(false),
            write_ok: AtomicBool::new(true),
        };
        a.read(true);
        assert_eq!(a.health.gauge.get(), 1);
        a.wrote(false);
        assert_eq!(a.health.gauge.get(), 0, "a failed write counts");
        a.wrote(true);
        a.read(false);
        assert_eq!(a.health.gauge.get(), 0, "a failed probe counts");
    }
}
