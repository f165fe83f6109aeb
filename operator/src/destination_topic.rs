//! The destination topic's configs, at its creation and at every config sync: the source
//! topic's non-excluded configs and its effective `max.message.bytes`, the timestamp bounds the
//! destination broker knows, and the spec's overrides (see [`topic_configs::destination_configs`]),
//! fitted to what the destination's Kafka version takes ([`config_fit`]). What it does not get
//! is recorded in [`MirrorScope::config_notes`] for the `MirrorTopic`'s status. Its replication
//! factor comes from `topicCreation` ([`replication`]); a factor the destination cannot hold is
//! [`TooManyReplicas`].

use std::collections::{BTreeMap, BTreeSet};

use kmirror_crds::v1alpha1::{ClusterMirrorSpec, FetcherEngine, MirrorTopic, MirrorTopicSpec};
use kmirror_state::kafka_admin::AdminError;
use rdkafka::error::RDKafkaErrorCode;

use crate::config_fit::{self, Fitted};
use crate::error::{Cause, TooManyReplicas};
use crate::kafka::{self, Creation, TopicConfigs};
use crate::scope::MirrorScope;
use crate::topic_configs::{self, Inputs};

/// The configs the destination topic of `source_topic` should have, given what it has now
/// (`None`: it is about to be created), and those it does not get.
pub async fn wanted(
    scope: &MirrorScope,
    source_topic: &str,
    now: Option<&TopicConfigs>,
) -> Result<Fitted, Cause> {
    let sync = &scope.mirror.spec.sync.topic_configs;
    let source = kafka::describe_topic_configs(&scope.source, source_topic).await?;
    let known: BTreeSet<String> = match now {
        Some(now) => now.effective.keys().cloned().collect(),
        None => known_topic_configs(scope).await,
    };
    let empty = BTreeMap::new();
    let exclude = sync.effective_exclude();
    let configs = topic_configs::destination_configs(&Inputs {
        source: if sync.enabled {
            &source.dynamic
        } else {
            &empty
        },
        source_max_message_bytes: source.max_message_bytes(),
        exclude: &exclude,
        overrides: &sync.overrides,
        destination: now.map_or(&empty, |n| &n.dynamic),
        known: &known,
        keeps_batch_codec: scope.mirror.spec.fetcher.engine == FetcherEngine::Batch,
    });
    let mut fitted = config_fit::fit(configs, &known, &sync.overrides);
    let refused = scope
        .config_notes
        .drop_refused(&scope.key, source_topic, &mut fitted.configs);
    config_fit::merge(&mut fitted.not_copied, refused);
    Ok(fitted)
}

/// The topic config names the destination broker knows, read from the state topic (empty when
/// it cannot be described).
async fn known_topic_configs(scope: &MirrorScope) -> BTreeSet<String> {
    let state_topic = scope.cache.topic_name();
    match kafka::describe_topic_configs(&scope.destination, state_topic).await {
        Ok(c) => c.effective.into_keys().collect(),
        Err(e) => {
            tracing::debug!(error = %e, "the destination's topic configs are not known");
            BTreeSet::new()
        }
    }
}

/// Whether a refusal is about the configs sent (not a passing fault).
pub fn config_refusal(code: RDKafkaErrorCode) -> bool {
    matches!(
        code,
        RDKafkaErrorCode::InvalidConfig | RDKafkaErrorCode::PolicyViolation
    )
}

/// The replication factor a destination topic is created with, and the field that sets it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Replication {
    /// Replicas per partition.
    pub factor: i32,
    /// Where it comes from, as a person would look for it.
    pub field: &'static str,
}

/// The replication factor of `topic`'s destination topic: its own `spec.topicCreation`, else
/// its mirror's (`None`: the destination broker's default).
pub fn replication(mirror: &ClusterMirrorSpec, topic: &MirrorTopicSpec) -> Option<Replication> {
    if let Some(factor) = topic.topic_creation.replication_factor {
        return Some(Replication {
            factor,
            field: "MirrorTopic spec.topicCreation.replicationFactor",
        });
    }
    mirror
        .topic_creation
        .replication_factor
        .map(|factor| Replication {
            factor,
            field: "ClusterMirror spec.topicCreation.replicationFactor",
        })
}

/// Creates the destination topic of `mt` with `partitions` (already existing is fine:
/// [`Creation::Existed`]) and the replication factor of [`replication`]. A config the broker
/// refuses and names in its answer is left out, remembered and noted; a broker that refuses an
/// unnamed config while timestamp bounds are sent gets the topic without the bounds, as its
/// defaults have them. Too many replicas is [`TooManyReplicas`]. Any other refusal names the
/// configs sent and the broker's message.
pub async fn create(
    scope: &MirrorScope,
    mt: &MirrorTopic,
    partitions: i32,
) -> Result<Creation, Cause> {
    let (source_topic, topic) = (mt.spec.source_topic.as_str(), mt.destination_topic());
    let replication = replication(&scope.mirror.spec, &mt.spec);
    let destination = &scope.destination;
    let overrides = &scope.mirror.spec.sync.topic_configs.overrides;
    let Fitted {
        mut configs,
        mut not_copied,
    } = wanted(scope, source_topic, None).await?;
    let mut bounds_dropped = false;
    loop {
        let refusal = match kafka::create_topic_answer(
            destination,
            topic,
            partitions,
            replication.map(|r| r.factor),
            &configs,
        )
        .await?
        {
            Ok(creation) => {
                scope
                    .config_notes
                    .record(&scope.key, source_topic, not_copied);
                return Ok(creation);
            }
            Err(e) => e,
        };
        let (code, message) = match &refusal {
            AdminError::Kafka {
                code: RDKafkaErrorCode::InvalidReplicationFactor,
                message,
            } => {
                let brokers = kafka::broker_count(destination, scope.cache.topic_name())
                    .await
                    .ok();
                return Err(TooManyReplicas {
                    topic: topic.to_string(),
                    asked: replication.map(|r| (r.factor, r.field)),
                    brokers,
                    answer: message.clone(),
                }
                .into());
            }
            AdminError::Kafka { code, message } if config_refusal(*code) => (*code, message),
            _ => {
                return Err(destination
                    .error(format!("creating topic {topic}: {refusal}"))
                    .into());
            }
        };
        if let Some(name) = config_fit::refused_key(message, configs.keys()) {
            let value = configs.remove(&name).unwrap_or_default();
            let note = config_fit::refused(&name, message, overrides);
            tracing::warn!(topic, config = %name, "the destination refused a config: {message}");
            scope
                .config_notes
                .refuse(&scope.key, source_topic, &name, &value, note.clone());
            config_fit::merge(&mut not_copied, vec![note]);
            continue;
        }
        if code == RDKafkaErrorCode::InvalidConfig
            && !bounds_dropped
            && configs.keys().any(|k| topic_configs::is_timestamp_bound(k))
        {
            bounds_dropped = true;
            configs.retain(|k, _| {
                !topic_configs::is_timestamp_bound(k) || overrides.contains_key(k.as_str())
            });
            tracing::warn!(
                topic,
                "the destination refused a timestamp bound: creating the topic with its defaults"
            );
            continue;
        }
        let sent: Vec<&str> = configs.keys().map(String::as_str).collect();
        return Err(destination
            .error(format!(
                "creating topic {topic}: {code:?}: {message} (configs sent: {}); leave out the \
                 one it refuses with spec.sync.topicConfigs.exclude",
                sent.join(", ")
            ))
            .into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_topic_overrides_the_mirror_and_neither_leaves_it_to_the_broker() {
        let mirror = |rf: Option<i32>| -> ClusterMirrorSpec {
            serde_json::from_value(serde_json::json!({
                "source": {"bootstrapServers": "a:9092"},
                "destination": {"bootstrapServers": "b:9092"},
                "topicCreation": rf.map_or(serde_json::json!({}), |f| {
                    serde_json::json!({"replicationFactor": f})
                }),
            }))
            .unwrap()
        };
        let topic = |rf: Option<i32>| -> MirrorTopicSpec {
            serde_json::from_value(serde_json::json!({
                "mirror": "dr", "sourceTopic": "t",
                "topicCreation": rf.map_or(serde_json::json!({}), |f| {
                    serde_json::json!({"replicationFactor": f})
                }),
            }))
            .unwrap()
        };
        let by_mirror = "ClusterMirror spec.topicCreation.replicationFactor";
        let by_topic = "MirrorTopic spec.topicCreation.replicationFactor";
        /// Mirror's factor, topic's factor, expected (factor, field).
        type Case = (Option<i32>, Option<i32>, Option<(i32, &'static str)>);
        let cases: &[Case] = &[
            (None, None, None),
            (Some(3), None, Some((3, by_mirror))),
            (None, Some(2), Some((2, by_topic))),
            (Some(3), Some(1), Some((1, by_topic))),
        ];
        for (m, t, want) in cases {
            let got = replication(&mirror(*m), &topic(*t)).map(|r| (r.factor, r.field));
            assert_eq!(got, *want, "mirror {m:?}, topic {t:?}");
        }
    }

    #[test]
    fn too_many_replicas_names_the_factor_its_field_and_the_brokers() {
        let refused = |asked, brokers| TooManyReplicas {
            topic: "orders".into(),
            asked,
            brokers,
            answer: "Replication factor: 4 larger than available brokers: 3.".into(),
        };
        let asked = Some((4, "MirrorTopic spec.topicCreation.replicationFactor"));
        assert_eq!(
            refused(asked, Some(3)).to_string(),
            "destination topic orders not created: replication factor 4 (MirrorTopic \
             spec.topicCreation.replicationFactor) but the destination has 3 brokers \
             (Replication factor: 4 larger than available brokers: 3.); set \
             spec.topicCreation.replicationFactor to 3 or less, or add brokers"
        );
        let unknown = refused(None, None).to_string();
        assert!(
            unknown.contains("default.replication.factor")
                && unknown.contains("fewer brokers")
                && unknown.contains("larger than available brokers"),
            "{unknown}"
        );
    }
}
