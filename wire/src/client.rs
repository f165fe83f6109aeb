//! The client of one cluster: one connection per broker (opened on first use, replaced when it
//! breaks), cluster metadata refreshed when it is old, marked stale, or a broker says leadership
//! moved, and routing of partition requests to their leaders. A client can be fenced for good
//! ([`Client::fence`]): every connection is closed abortively and nothing more is written.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{MetadataRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

use crate::config::WireConfig;
use crate::connection::{Connection, Fence};
use crate::error::{KafkaCode, WireError};
use crate::metadata::{ClusterMetadata, TopicMetadata};
use crate::oauth::TokenSource;

type Slot = Arc<tokio::sync::Mutex<Option<Arc<Connection>>>>;

struct Inner {
    config: WireConfig,
    tls: Option<Arc<rustls::ClientConfig>>,
    tokens: Option<TokenSource>,
    /// One slot per broker address; a slot's lock serialises connecting to that broker.
    slots: Mutex<HashMap<String, Slot>>,
    metadata: RwLock<Arc<ClusterMetadata>>,
    /// Topics metadata is kept for.
    topics: Mutex<BTreeSet<String>>,
    stale: AtomicBool,
    refreshing: tokio::sync::Mutex<()>,
    fence: Fence,
    /// Some connection of this client completed its handshake: from then on a broker that
    /// closes a new connection during the handshake is a network fault (retriable), not a
    /// listener that speaks another protocol.
    reached: AtomicBool,
}

/// A Kafka client for one cluster. Clones share connections and metadata.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

/// Where a partition's requests go.
pub(crate) struct Route {
    pub conn: Arc<Connection>,
    pub leader_epoch: i32,
    pub topic_id: Uuid,
}

/// A partition's leader as the metadata says, before any connection to it.
#[derive(Debug, Clone)]
pub(crate) struct Leader {
    pub address: String,
    pub leader_epoch: i32,
    pub topic_id: Uuid,
}

impl Client {
    /// Builds a client and reads the cluster's metadata through the bootstrap brokers, which
    /// proves the settings (TLS, SASL) work.
    pub async fn connect(config: WireConfig) -> Result<Client, WireError> {
        let tls = match &config.tls {
            Some(settings) => Some(crate::tls::client_config(settings)?),
            None => None,
        };
        let tokens = match &config.sasl {
            Some(crate::config::SaslMechanism::OAuthBearer(oidc)) => {
                Some(TokenSource::new(oidc, config.connect_timeout)?)
            }
            _ => None,
        };
        let client = Client {
            inner: Arc::new(Inner {
                config,
                tls,
                tokens,
                slots: Mutex::new(HashMap::new()),
                metadata: RwLock::new(Arc::new(ClusterMetadata::empty())),
                topics: Mutex::new(BTreeSet::new()),
                stale: AtomicBool::new(true),
                refreshing: tokio::sync::Mutex::new(()),
                fence: Fence::default(),
                reached: AtomicBool::new(false),
            }),
        };
        client.refresh_metadata(&[]).await?;
        Ok(client)
    }

    /// The settings.
    pub fn config(&self) -> &WireConfig {
        &self.inner.config
    }

    /// The metadata as last read.
    pub fn metadata(&self) -> Arc<ClusterMetadata> {
        self.inner
            .metadata
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The cluster id.
    pub fn cluster_id(&self) -> Option<String> {
        self.metadata().cluster_id.clone()
    }

    /// Makes the next request refresh metadata first (after a leader change or lost connection).
    pub fn mark_stale(&self) {
        self.inner.stale.store(true, Ordering::Relaxed);
    }

    /// Fences the client for good: nothing more is written by it — every open connection is
    /// closed abortively (the kernel drops what it had not sent), requests already queued are not
    /// written, and no new connection is opened. For a writer whose right to write ended.
    pub fn fence(&self) {
        self.inner.fence.set();
        let slots: Vec<Slot> = self
            .inner
            .slots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect();
        for slot in slots {
            // A slot locked by a connect in progress: that connect checks the fence when done.
            if let Ok(conn) = slot.try_lock()
                && let Some(conn) = conn.as_ref()
            {
                conn.abort("the client was fenced");
            }
        }
    }

    /// Whether [`Client::fence`] was called.
    pub fn is_fenced(&self) -> bool {
        self.inner.fence.is_set()
    }

    fn fenced(&self, broker: &str) -> WireError {
        WireError::Fenced {
            broker: broker.to_string(),
            api: "request",
        }
    }

    /// The requests a broker of the cluster offers, key → (min, max) version (the first broker
    /// the metadata lists; the bootstrap broker before metadata was read).
    pub async fn broker_api_versions(
        &self,
    ) -> Result<std::collections::BTreeMap<i16, (i16, i16)>, WireError> {
        let address = self
            .metadata()
            .brokers
            .values()
            .next()
            .map(|b| format!("{}:{}", b.host, b.port))
            .or_else(|| self.inner.config.bootstrap.first().cloned())
            .ok_or_else(|| WireError::Metadata {
                reason: "no broker known".into(),
            })?;
        Ok(self.connection(&address).await?.api_versions())
    }

    /// A connection to `address`, reused while it works.
    pub(crate) async fn connection(&self, address: &str) -> Result<Arc<Connection>, WireError> {
        if self.is_fenced() {
            return Err(self.fenced(address));
        }
        let slot = self
            .inner
            .slots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(address.to_string())
            .or_default()
            .clone();
        let mut slot = slot.lock().await;
        if let Some(conn) = slot.as_ref()
            && conn.is_usable()
        {
            return Ok(conn.clone());
        }
        if let Some(old) = slot.take()
            && let Some(reason) = old.closed_reason()
        {
            tracing::debug!(broker = %address, %reason, "reconnecting");
        }
        let conn = Arc::new(
            Connection::connect(
                address,
                &self.inner.config,
                self.inner.tls.as_ref(),
                self.inner.tokens.as_ref(),
                &self.inner.fence,
                !self.inner.reached.load(Ordering::Relaxed),
            )
            .await?,
        );
        self.inner.reached.store(true, Ordering::Relaxed);
        // Fenced while connecting: this connection is never used.
        if self.is_fenced() {
            conn.abort("the client was fenced");
            return Err(self.fenced(address));
        }
        *slot = Some(conn.clone());
        Ok(conn)
    }

    /// Any working connection: an open one, else a known broker, else a bootstrap server.
    pub(crate) async fn any_connection(&self) -> Result<Arc<Connection>, WireError> {
        let open: Vec<Arc<Connection>> = {
            let slots = self.inner.slots.lock().unwrap_or_else(|p| p.into_inner());
            slots
                .values()
                .filter_map(|s| s.try_lock().ok().and_then(|c| c.clone()))
                .filter(|c| c.is_usable())
                .collect()
        };
        if let Some(conn) = open.into_iter().next() {
            return Ok(conn);
        }
        let mut addresses: Vec<String> = self
            .metadata()
            .brokers
            .values()
            .map(|b| b.address())
            .collect();
        addresses.extend(self.inner.config.bootstrap.iter().cloned());
        let mut last = None;
        for address in addresses {
            match self.connection(&address).await {
                Ok(conn) => return Ok(conn),
                // Settings or credentials are wrong: another broker will say the same.
                Err(e) if !e.is_retriable() => return Err(e),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| WireError::Metadata {
            reason: "no broker address known".into(),
        }))
    }

    /// Reads metadata for `topics` and every topic asked about before.
    pub async fn refresh_metadata(
        &self,
        topics: &[&str],
    ) -> Result<Arc<ClusterMetadata>, WireError> {
        let wanted: Vec<String> = {
            let mut known = self.inner.topics.lock().unwrap_or_else(|p| p.into_inner());
            known.extend(topics.iter().map(|t| t.to_string()));
            known.iter().cloned().collect()
        };
        let _guard = self.inner.refreshing.lock().await;
        let request = MetadataRequest::default()
            .with_allow_auto_topic_creation(false)
            .with_topics(Some(
                wanted
                    .iter()
                    .map(|t| {
                        MetadataRequestTopic::default()
                            .with_name(Some(TopicName(StrBytes::from_string(t.clone()))))
                    })
                    .collect(),
            ));
        let mut last = None;
        for _ in 0..3 {
            let conn = self.any_connection().await?;
            match conn.send(&request, 12).await {
                Ok(response) => {
                    let merged = Arc::new(self.metadata().merge(&response));
                    *self
                        .inner
                        .metadata
                        .write()
                        .unwrap_or_else(|p| p.into_inner()) = merged.clone();
                    self.inner.stale.store(false, Ordering::Relaxed);
                    return Ok(merged);
                }
                Err(e) => {
                    tracing::debug!(broker = %conn.broker(), error = %e, "metadata request failed");
                    last = Some(e);
                    tokio::time::sleep(self.inner.config.retry_backoff).await;
                }
            }
        }
        Err(WireError::Metadata {
            reason: last.map_or_else(|| "no answer".into(), |e| e.to_string()),
        })
    }

    fn needs_refresh(&self, topic: &str) -> bool {
        let meta = self.metadata();
        self.inner.stale.load(Ordering::Relaxed)
            || meta.fetched_at.elapsed() > self.inner.config.metadata_max_age
            || !meta.topics.contains_key(topic)
    }

    /// Metadata of `topic`, refreshed when stale; an error when the topic does not exist.
    pub async fn topic(&self, topic: &str) -> Result<TopicMetadata, WireError> {
        let meta = if self.needs_refresh(topic) {
            self.refresh_metadata(&[topic]).await?
        } else {
            self.metadata()
        };
        let t = meta.topics.get(topic).ok_or_else(|| WireError::Metadata {
            reason: format!("the cluster did not describe topic {topic}"),
        })?;
        if !t.error.is_ok() {
            return Err(WireError::Metadata {
                reason: format!("topic {topic}: {}", t.error),
            });
        }
        Ok(t.clone())
    }

    /// The leader of `topic`-`partition` as the metadata says (refreshed once when it knows
    /// none); `Err(code)` when no leader is known even after a refresh. Opens no connection.
    pub(crate) async fn leader(
        &self,
        topic: &str,
        partition: i32,
    ) -> Result<Result<Leader, KafkaCode>, WireError> {
        let mut refreshed = false;
        loop {
            let t = self.topic(topic).await?;
            let meta = self.metadata();
            let code = match t.partitions.get(&partition) {
                None => KafkaCode::UNKNOWN_TOPIC_OR_PARTITION,
                Some(p) if p.leader < 0 => KafkaCode::LEADER_NOT_AVAILABLE,
                Some(p) => match meta.brokers.get(&p.leader) {
                    None => KafkaCode::LEADER_NOT_AVAILABLE,
                    Some(broker) => {
                        return Ok(Ok(Leader {
                            address: broker.address(),
                            leader_epoch: p.leader_epoch,
                            topic_id: t.id,
                        }));
                    }
                },
            };
            if refreshed {
                return Ok(Err(code));
            }
            self.mark_stale();
            refreshed = true;
        }
    }

    /// A connection to `leader`; a failure marks the metadata stale (the leader may have moved
    /// off a broker that went away).
    pub(crate) async fn connect_to(&self, leader: &Leader) -> Result<Route, WireError> {
        match self.connection(&leader.address).await {
            Ok(conn) => Ok(Route {
                conn,
                leader_epoch: leader.leader_epoch,
                topic_id: leader.topic_id,
            }),
            Err(e) => {
                self.mark_stale();
                Err(e)
            }
        }
    }

    /// The connection to the leader of `topic`-`partition`, with the leader epoch and topic id;
    /// `Err(code)` when no leader is known even after a refresh.
    pub(crate) async fn route(
        &self,
        topic: &str,
        partition: i32,
    ) -> Result<Result<Route, KafkaCode>, WireError> {
        match self.leader(topic, partition).await? {
            Err(code) => Ok(Err(code)),
            Ok(leader) => self.connect_to(&leader).await.map(Ok),
        }
    }

    /// Drops a broken connection so the next request opens a new one.
    pub(crate) fn forget(&self, conn: &Connection) {
        let slot = self
            .inner
            .slots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(conn.broker())
            .cloned();
        if let Some(slot) = slot
            && let Ok(mut slot) = slot.try_lock()
            && slot
                .as_ref()
                .is_some_and(|c| std::ptr::eq(Arc::as_ptr(c), conn))
        {
            *slot = None;
        }
        self.mark_stale();
    }
}
