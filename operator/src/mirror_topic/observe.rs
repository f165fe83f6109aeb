//! Observe: everything a `MirrorTopic` reconcile decides from — its state records, the source and
//! destination topics, its fetcher pods, the log ends a failover needs, the failback facts, the
//! retry request and the time — read once into one [`Observation`].

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kmirror_crds::v1alpha1::{MirrorTopic, PartitionState};
use kmirror_state::records::{PartitionRecords, now_ms};
use kube::ResourceExt;
use kube::api::{Api, ListParams};

use super::pod_view::{PodView, fetcher_of};
use crate::context::Context;
use crate::error::{Error, KafkaError, Result};
use crate::leases::LeaseHold;
use crate::leases::ledger::Holder;
use crate::lifecycle::{FetcherObservation, SourceObservation, awaits_failback, needs_source_end};
use crate::pods::{LABEL_MIRROR, LABEL_MIRROR_TOPIC, label_value};
use crate::pool::LABEL_POOL;
use crate::scope::MirrorScope;
use crate::source_gone::Sighting;
use crate::{failback, kafka};

/// Annotation whose change asks to retry partitions that failed for a non-retryable reason.
pub const ANNOTATION_RETRY: &str = "kmirror.io/retry";

/// How long describing the source topic may take before the source counts as unreachable.
pub const SOURCE_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a source that left a describe unanswered counts as down without being asked again.
pub const SOURCE_DOWN_MEMO: Duration = Duration::from_secs(10);

/// The source topic as described.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceTopic {
    /// It exists.
    Described {
        /// Its partitions.
        partitions: usize,
        /// Its topic ID (absent on sources without).
        topic_id: Option<String>,
    },
    /// It does not exist.
    Missing,
    /// The source did not answer: why.
    Unreachable(String),
}

/// The destination topic as described.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DestinationTopic {
    /// Not described (the source topic was not).
    NotRead,
    /// It does not exist.
    Missing,
    /// It exists with this many partitions.
    Present(usize),
}

/// Everything a reconcile of one `MirrorTopic` decides from.
#[derive(Debug, Clone)]
pub struct Observation {
    /// The topic's records in the state topic, by partition.
    pub records: BTreeMap<i32, PartitionRecords>,
    /// The source topic.
    pub source: SourceTopic,
    /// The destination topic.
    pub destination: DestinationTopic,
    /// Replicas of the destination topic's partitions, when it was described.
    pub destination_replicas: Option<usize>,
    /// Fetcher pods by group index; with a pool, by partition (one view per partition of the
    /// pool pod that lists it).
    pub pods: BTreeMap<i32, PodView>,
    /// The mirror runs a fetcher pool.
    pub pooled: bool,
    /// With a pool: the topic's own per-topic pods left from before it (not being deleted yet).
    pub leftover_pods: Vec<String>,
    /// Source log ends of partitions that may enter (or are in) STOPPING without a drain target
    /// (`None`: the read failed).
    pub source_ends: BTreeMap<i32, Option<i64>>,
    /// Destination log ends of STOPPING partitions whose fetcher is gone (their last mirrored
    /// offset).
    pub destination_ends: BTreeMap<i32, Result<i64, KafkaError>>,
    /// Failback facts of a reverse mirror's PREPARING partitions.
    pub failback: failback::Observed,
    /// Partitions some fetcher may still write to under a write lease (a replaced pod's
    /// predecessor, a lost node's process): no replacement starts and no failover makes them
    /// writable until the lease ends.
    pub leases: BTreeMap<i32, LeaseHold>,
    /// The value of the retry annotation.
    pub retry_token: Option<String>,
    /// The source topic was found missing twice, apart, at the recorded source cluster.
    pub source_gone: bool,
    /// Now, ms since the epoch.
    pub now_ms: i64,
}

impl Observation {
    /// The source topic ID the fetchers recorded.
    pub fn recorded_topic_id(&self) -> Option<&str> {
        self.records.values().find_map(|r| {
            r.position
                .as_ref()
                .and_then(|p| p.source_topic_id.as_deref())
        })
    }

    /// The source topic for the lifecycle: a different topic ID than recorded is a recreated
    /// topic.
    pub fn source_observation(&self) -> SourceObservation {
        match &self.source {
            SourceTopic::Described { topic_id, .. } => {
                let recreated = matches!((self.recorded_topic_id(), topic_id),
                    (Some(a), Some(b)) if a != b);
                if recreated {
                    SourceObservation::Recreated
                } else {
                    SourceObservation::Present { end: None }
                }
            }
            SourceTopic::Missing if self.source_gone => SourceObservation::Deleted,
            SourceTopic::Missing => SourceObservation::Missing,
            SourceTopic::Unreachable(_) => SourceObservation::Unreachable,
        }
    }

    /// The source's partition count, when described.
    pub fn source_partitions(&self) -> Option<usize> {
        match &self.source {
            SourceTopic::Described { partitions, .. } => Some(*partitions),
            _ => None,
        }
    }

    /// The partitions to reconcile: the source's, plus any the state topic knows (a deleted
    /// source leaves them).
    pub fn partitions(&self) -> BTreeSet<i32> {
        let mut partitions: BTreeSet<i32> = self.records.keys().copied().collect();
        if let Some(n) = self.source_partitions() {
            partitions.extend(0..n as i32);
        }
        partitions
    }

    /// The lifecycle state recorded for a partition.
    pub fn state_of(&self, partition: i32) -> PartitionState {
        self.records
            .get(&partition)
            .and_then(|r| r.state.as_ref())
            .map_or(PartitionState::Unknown, |s| s.state)
    }
}

/// Reads everything a reconcile of `mt` decides from.
pub async fn observe(ctx: &Context, scope: &MirrorScope, mt: &MirrorTopic) -> Result<Observation> {
    let name = mt.name_any();
    let topic = &mt.spec.source_topic;
    let records = scope.cache.topic(&scope.key, topic);
    let source = if scope.source.unanswered_within(SOURCE_DOWN_MEMO) {
        SourceTopic::Unreachable(format!(
            "the source did not answer within the last {}s",
            SOURCE_DOWN_MEMO.as_secs()
        ))
    } else {
        let described = kafka::describe_topic_within(&scope.source, topic, SOURCE_TIMEOUT).await;
        scope.source.note_answer(described.is_ok());
        match described {
            Ok(Some(d)) => SourceTopic::Described {
                partitions: d.partitions,
                topic_id: d.topic_id,
            },
            Ok(None) => SourceTopic::Missing,
            Err(e) => {
                tracing::warn!(%name, error = %e, "source unreachable");
                SourceTopic::Unreachable(e.to_string())
            }
        }
    };
    let (destination, destination_replicas) = match source {
        SourceTopic::Described { .. } => {
            match kafka::describe_topic(&scope.destination, mt.destination_topic())
                .await
                .map_err(Error::DescribeDestination)?
            {
                Some(d) => (
                    DestinationTopic::Present(d.partitions),
                    Some(d.replication_factor),
                ),
                None => (DestinationTopic::Missing, None),
            }
        }
        _ => (DestinationTopic::NotRead, None),
    };
    let pods_api: Api<Pod> = Api::namespaced(ctx.client.clone(), &scope.namespace());
    let pooled = scope.mirror.spec.fetcher.pool.is_some();
    // Without a pool, the topic's own pods; with one, every fetcher pod of the mirror in one
    // request: the pool's, and the topic's own from before it.
    let selector = if pooled {
        format!("{LABEL_MIRROR}={}", scope.mirror.name_any())
    } else {
        format!("{LABEL_MIRROR_TOPIC}={}", label_value(&name))
    };
    let pod_list = pods_api
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(Error::ListPods)?;
    let (pool_pods, own_pods): (Vec<Pod>, Vec<Pod>) = pod_list
        .items
        .into_iter()
        .partition(|p| p.labels().contains_key(LABEL_POOL));
    let own: BTreeMap<i32, PodView> = own_pods
        .iter()
        .filter(|p| p.labels().get(LABEL_MIRROR_TOPIC) == Some(&label_value(&name)))
        .map(|pod| (PodView::index_of(pod), PodView::of(pod)))
        .collect();
    let mut leftover_pods = Vec::new();
    let pods = if pooled {
        let mut views = super::pool_view::views(topic, &pool_pods, &records, now_ms());
        // Per-topic pods from before the pool go first: their partitions wait for them.
        for pod in own.into_values() {
            if !pod.terminating {
                leftover_pods.push(pod.name.clone());
            }
            for p in &pod.partitions {
                let view = PodView {
                    partitions: vec![*p],
                    terminating: true,
                    ..pod.clone()
                };
                views.insert(*p, view);
            }
        }
        views
    } else {
        own
    };
    // From here on only the pods that exist (and are not going) may hold write leases.
    let grantor = ctx
        .leases
        .get(
            scope.destination.key,
            &scope.destination.config,
            &scope.mirror.spec.state_topic,
        )
        .await
        .map_err(Error::OpenLeases)?;
    let holders: Vec<Holder> = pods
        .values()
        .filter(|p| !p.terminating)
        .map(|p| Holder {
            name: p.name.clone(),
            uid: p.uid.clone(),
        })
        .collect::<BTreeSet<Holder>>()
        .into_iter()
        .collect();
    let mut known: BTreeSet<i32> = records.keys().copied().collect();
    if let SourceTopic::Described { partitions, .. } = &source {
        known.extend(0..*partitions as i32);
    }
    let known: Vec<i32> = known.into_iter().collect();
    let leases = grantor.holds(&scope.key, topic, &known, &holders);
    let mut o = Observation {
        records,
        source,
        destination,
        destination_replicas,
        pods,
        pooled,
        leftover_pods,
        source_ends: BTreeMap::new(),
        destination_ends: BTreeMap::new(),
        failback: Default::default(),
        leases,
        retry_token: mt.annotations().get(ANNOTATION_RETRY).cloned(),
        source_gone: false,
        now_ms: now_ms(),
    };
    let sighting_key = format!("{}/{name}", scope.namespace());
    if o.source == SourceTopic::Missing {
        let cluster_id = scope.source.cluster_id(SOURCE_TIMEOUT).await.ok();
        let recorded = o.records.values().find_map(|r| {
            r.position
                .as_ref()
                .map(|p| p.source_cluster_id.clone())
                .filter(|id| !id.is_empty())
        });
        let sighting = Sighting {
            at_ms: o.now_ms,
            cluster_id,
        };
        o.source_gone = ctx
            .source_sightings
            .missing(&sighting_key, sighting, recorded.as_deref());
    } else if matches!(o.source, SourceTopic::Described { .. }) {
        ctx.source_sightings.present(&sighting_key);
    }

    // The log ends a failover needs: where a graceful drain ends, where a stopped fetcher ended.
    let per_pod = crate::pods::partitions_per_pod(&scope.mirror);
    let source_obs = o.source_observation();
    for p in o.partitions() {
        let recorded = o.records.get(&p).and_then(|r| r.state.as_ref());
        let fetcher = fetcher_of(&o.pods, p, per_pod, None);
        if needs_source_end(recorded, mt.spec.state, source_obs) {
            // A source that did not answer the describe is not asked again per partition (15 s
            // each): an immediate failover with the source down must not wait for it.
            let end = if source_obs == SourceObservation::Unreachable {
                None
            } else {
                kafka::watermarks(&scope.source, topic, p).await.ok()
            };
            o.source_ends.insert(p, end.map(|(_, end)| end));
        }
        if o.state_of(p) == PartitionState::Stopping && fetcher == FetcherObservation::Absent {
            let end = kafka::watermarks(&scope.destination, mt.destination_topic(), p).await;
            o.destination_ends.insert(p, end.map(|(_, end)| end));
        }
    }

    // Failback: PREPARING partitions of a reverse mirror check the forward mirror's last
    // mirrored offsets and the destination for divergence first.
    if scope.forward_mirror().is_some() {
        let waiting: Vec<(i32, PartitionRecords)> = o
            .partitions()
            .into_iter()
            .filter(|p| awaits_failback(o.state_of(*p), mt.spec.state))
            .map(|p| (p, o.records.get(&p).cloned().unwrap_or_default()))
            .collect();
        if !waiting.is_empty() {
            o.failback = failback::observe(ctx, scope, mt, &waiting)
                .await
                .map_err(Error::ObserveFailback)?;
        }
    }
    Ok(o)
}
