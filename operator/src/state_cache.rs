//! The operator's view of the state topic: a background reader tails it into memory, so that
//! reconciles read partition states and fetcher positions without touching Kafka, and the
//! operator's own transitions are written through (durable first, then visible locally).
//!
//! Writes are fenced (`kmirror_state::fence`): before it writes a mirror's records the operator
//! claims the mirror, every record it writes carries the claim's token, records of a superseded
//! operator are ignored (and rewritten with the current value, so compaction keeps ours), and an
//! operator that reads a newer claim of another process for a mirror it claimed stops at once.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use kmirror_state::fence::{Admission, Claim, Fences, claim_value, token_of};
use kmirror_state::quiet::QuietEof;
use kmirror_state::records::{
    FetcherStatus, PartitionRecords, PartitionStateRecord, RecordKind, StateKey,
};
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
    /// Claims read so far, per mirror.
    fences: Mutex<Fences>,
    /// This process's claim token per mirror, once its claim was read back.
    own: Mutex<BTreeMap<String, i64>>,
    /// One claim at a time.
    claiming: tokio::sync::Mutex<()>,
    /// Keys whose latest record is a superseded operator's (ignored until rewritten).
    stale: Mutex<std::collections::BTreeSet<StateKey>>,
}

/// This operator process: its identity in claims and the nonce that tells its claims apart.
fn me() -> &'static (String, String) {
    static ME: std::sync::OnceLock<(String, String)> = std::sync::OnceLock::new();
    ME.get_or_init(|| {
        let identity = std::env::var("POD_NAME").unwrap_or_else(|_| {
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
            format!("{}/pid-{}", host.trim(), std::process::id())
        });
        let nonce = format!(
            "{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or_default()
        );
        (identity, nonce)
    })
}

/// How long a reconcile waits for a state topic's first full read.
pub const STATE_LOAD_WAIT: Duration = Duration::from_secs(20);

/// How long a claim may take to be read back.
const CLAIM_WAIT: Duration = Duration::from_secs(15);

/// Whether this process may write a mirror's records: the token of its own claim when that
/// claim is the one in force, `Ok(None)` before it claimed, an error once another process's
/// newer claim was read.
fn token_to_write(
    own: Option<i64>,
    current: Option<&Claim>,
    nonce: &str,
) -> std::result::Result<Option<i64>, Claim> {
    match (own, current) {
        (None, _) => Ok(None),
        (Some(token), Some(c)) if c.nonce != nonce && c.token > token => Err(c.clone()),
        (Some(token), _) => Ok(Some(token)),
    }
}

/// Stops the process: another operator took `mirror` over. Like losing the leader lease.
fn step_down(topic: &str, mirror: &str, by: &Claim) -> ! {
    tracing::error!(
        state_topic = %topic,
        %mirror,
        claim_offset = by.token,
        "operator {} took over mirror {mirror} (its claim is at offset {} of state topic {topic}); \
         this operator stops so that one operator writes the mirror's state. Run one replica, or \
         several with --leader-election",
        by.identity,
        by.token
    );
    std::process::exit(3)
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
        ended: tokio::sync::mpsc::UnboundedSender<Ended>,
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
            fences: Mutex::default(),
            own: Mutex::default(),
            claiming: tokio::sync::Mutex::new(()),
            stale: Mutex::default(),
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
            .spawn(move || tail(consumer, &topic, weak, stop, &ended))
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
        crate::failpoint::pause_point("state-write").await;
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

    /// Waits (bounded) for the first full read, then claims `mirror` for this process unless it
    /// holds the claim in force already; returns the claim's token. Every reconcile that reads
    /// or writes a mirror's state calls this first.
    pub async fn own(self: &Arc<Self>, mirror: &str) -> Result<i64> {
        if !self.wait_loaded(STATE_LOAD_WAIT).await {
            return Err(StateError(format!(
                "{} is still being read; nothing is decided before it is read to its end",
                self.topic
            )));
        }
        if let Some(token) = self.token(mirror) {
            return Ok(token);
        }
        let _one = self.claiming.lock().await;
        if let Some(token) = self.token(mirror) {
            return Ok(token);
        }
        let (identity, nonce) = me();
        let me_ = self.clone();
        let key = StateKey::claim(mirror);
        let value = claim_value(identity, nonce);
        let written = tokio::task::spawn_blocking(move || {
            let writer = me_.writer.lock().unwrap_or_else(|p| p.into_inner());
            writer.send_raw(&key, Some(&value))?;
            writer.flush(Duration::from_secs(15))
        })
        .await
        .map_err(|e| StateError(e.to_string()))?;
        self.available.wrote(written.is_ok());
        written.map_err(|e| StateError(e.to_string()))?;
        let deadline = Instant::now() + CLAIM_WAIT;
        loop {
            if let Some(token) = self.token(mirror) {
                tracing::info!(state_topic = %self.topic, %mirror, token, "claimed the mirror's state");
                return Ok(token);
            }
            if Instant::now() > deadline {
                return Err(StateError(format!(
                    "the claim of mirror {mirror} was not read back from {} within {}s",
                    self.topic,
                    CLAIM_WAIT.as_secs()
                )));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// This process's token for `mirror` while its claim is in force; stops the process when
    /// another one's newer claim was read.
    fn token(&self, mirror: &str) -> Option<i64> {
        let own = self
            .own
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(mirror)
            .copied();
        let fences = self.fences.lock().unwrap_or_else(|p| p.into_inner());
        match token_to_write(own, fences.current(mirror), &me().1) {
            Ok(token) => token,
            Err(by) => step_down(&self.topic, mirror, &by),
        }
    }

    async fn write(self: &Arc<Self>, batch: Vec<(StateKey, Option<Vec<u8>>)>) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        let mut tokens = BTreeMap::new();
        for (k, _) in &batch {
            if !tokens.contains_key(&k.mirror) {
                tokens.insert(k.mirror.clone(), self.own(&k.mirror).await?);
            }
        }
        let me = self.clone();
        let sent = batch.clone();
        let written = tokio::task::spawn_blocking(move || {
            // Sent under the lock (the token checked right before), flushed outside it: the
            // writes of concurrent reconciles share their round trips.
            let own = {
                let writer = me.writer.lock().unwrap_or_else(|p| p.into_inner());
                let own = writer.share();
                for (k, v) in &sent {
                    // Refused on write: checked again right before sending.
                    let token = me.token(&k.mirror).or(tokens.get(&k.mirror).copied());
                    own.send_fenced(k, v.as_deref(), token)?;
                }
                own
            };
            own.flush(Duration::from_secs(15))
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

    /// Whether the unit of `key` holds a final position (stopped or failed).
    fn position_ended(&self, key: &StateKey) -> bool {
        let unit = (key.mirror.clone(), key.topic.clone(), key.partition);
        self.units
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&unit)
            .and_then(|r| r.position.as_ref())
            .is_some_and(|p| p.status != FetcherStatus::Running)
    }

    /// Takes one record read from the topic: claims go to the fences, a superseded operator's
    /// records are ignored (and rewritten when this process holds the mirror), others apply.
    fn read(&self, key: &StateKey, message: &rdkafka::message::BorrowedMessage<'_>) {
        let admission = self.fences.lock().unwrap_or_else(|p| p.into_inner()).admit(
            key,
            message.offset(),
            token_of(message.headers()),
            message.payload(),
        );
        match admission {
            Admission::Apply => {
                self.stale
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(key);
                self.apply(key, message.payload());
            }
            Admission::Claim => {
                let current = self
                    .fences
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .current(&key.mirror)
                    .cloned();
                if let Some(c) = current.filter(|c| c.nonce == me().1) {
                    self.own
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(key.mirror.clone(), c.token);
                    self.repair(&key.mirror);
                } else {
                    // Stops the process when the new claim supersedes its own.
                    self.token(&key.mirror);
                }
            }
            Admission::Stale { token, current } => {
                tracing::warn!(
                    state_topic = %self.topic,
                    mirror = %key.mirror,
                    offset = message.offset(),
                    token,
                    current,
                    "ignoring a state record written by a superseded operator"
                );
                self.stale
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(key.clone());
                self.repair(&key.mirror);
            }
        }
    }

    /// Rewrites, with this process's token, the current value of every key of `mirror` whose
    /// latest record a superseded operator wrote — so that compaction keeps ours. Only while
    /// this process holds the mirror's claim; blocking (the reader thread calls it).
    fn repair(&self, mirror: &str) {
        let Some(token) = self.token(mirror) else {
            return;
        };
        let keys: Vec<StateKey> = self
            .stale
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|k| k.mirror == mirror)
            .cloned()
            .collect();
        if keys.is_empty() {
            return;
        }
        let values: Vec<Option<Vec<u8>>> = {
            let units = self.units.read().unwrap_or_else(|p| p.into_inner());
            keys.iter()
                .map(|k| {
                    units
                        .get(&(k.mirror.clone(), k.topic.clone(), k.partition))
                        .and_then(|r| r.value_of(k))
                })
                .collect()
        };
        let writer = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        let written = keys
            .iter()
            .zip(&values)
            .try_for_each(|(k, v)| writer.send_fenced(k, v.as_deref(), Some(token)))
            .and_then(|()| writer.flush(Duration::from_secs(15)));
        match written {
            Ok(()) => tracing::info!(
                state_topic = %self.topic,
                %mirror,
                records = keys.len(),
                "rewrote the records a superseded operator wrote last"
            ),
            Err(e) => tracing::warn!(
                state_topic = %self.topic,
                %mirror,
                error = %e,
                "could not rewrite the records a superseded operator wrote last; retried at the next one"
            ),
        }
    }
}

fn tail(
    consumer: BaseConsumer<QuietEof>,
    topic: &str,
    cache: std::sync::Weak<StateCache>,
    stop: Arc<AtomicBool>,
    ended: &tokio::sync::mpsc::UnboundedSender<Ended>,
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
                    cache.read(&key, &m);
                    if key.kind == RecordKind::Position {
                        cache.changed.notify_waiters();
                        if cache.loaded() && cache.position_ended(&key) {
                            let _ = ended.send((key.mirror.clone(), key.topic.clone()));
                        }
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

/// A topic whose fetcher recorded a final position (stopped or failed): `(mirror, source
/// topic)`, the mirror as `namespace/name`.
pub type Ended = (String, String);

/// State caches by (destination configuration, topic).
pub struct StateCaches {
    caches: Mutex<HashMap<(u64, String), Arc<StateCache>>>,
    health: Mutex<HashMap<String, Arc<TopicHealth>>>,
    ended: tokio::sync::mpsc::UnboundedSender<Ended>,
    ended_rx: Mutex<Option<tokio::sync::mpsc::UnboundedReceiver<Ended>>>,
}

impl Default for StateCaches {
    fn default() -> StateCaches {
        let (ended, rx) = tokio::sync::mpsc::unbounded_channel();
        StateCaches {
            caches: Mutex::default(),
            health: Mutex::default(),
            ended,
            ended_rx: Mutex::new(Some(rx)),
        }
    }
}

impl StateCaches {
    /// The topics whose fetcher recorded a final position, as the caches read them (once: the
    /// controller that reconciles them takes it). A stop inside a running pool process changes
    /// no pod: this is how its topic hears of it before its next steady look.
    pub fn take_ended(&self) -> Option<tokio::sync::mpsc::UnboundedReceiver<Ended>> {
        self.ended_rx
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
    }

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
        let (config, t, ended) = (config.clone(), topic.to_string(), self.ended.clone());
        let cache =
            tokio::task::spawn_blocking(move || StateCache::start(&config, &t, health, key, ended))
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
    fn a_process_writes_only_under_the_claim_in_force() {
        let claim = |token: i64, nonce: &str| Claim {
            token,
            identity: format!("op-{nonce}"),
            nonce: nonce.into(),
        };
        /// Name, own token, claim in force, expected token (or the newer claim's).
        type Case = (
            &'static str,
            Option<i64>,
            Option<Claim>,
            std::result::Result<Option<i64>, i64>,
        );
        let cases: Vec<Case> = vec![
            (
                "not claimed yet: claim first",
                None,
                Some(claim(3, "b")),
                Ok(None),
            ),
            (
                "its own claim in force",
                Some(7),
                Some(claim(7, "me")),
                Ok(Some(7)),
            ),
            (
                "its own claim not read back yet",
                Some(7),
                None,
                Ok(Some(7)),
            ),
            (
                "another process claimed later: refused",
                Some(7),
                Some(claim(9, "b")),
                Err(9),
            ),
            (
                "an older claim of another process read late",
                Some(7),
                Some(claim(5, "b")),
                Ok(Some(7)),
            ),
        ];
        for (name, own, current, expected) in cases {
            let got = token_to_write(own, current.as_ref(), "me").map_err(|c| c.token);
            assert_eq!(got, expected, "{name}");
        }
    }

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
