//! The destination topic's configs, at its creation and at every config sync: the source
//! topic's non-excluded configs and its effective `max.message.bytes`, the timestamp bounds the
//! destination broker knows, and the spec's overrides (see [`topic_configs::destination_configs`]),
//! fitted to what the destination's Kafka version takes ([`config_fit`]). What it does not get
//! is recorded in [`MirrorScope::config_notes`] for the `MirrorTopic`'s status.

use std::collections::{BTreeMap, BTreeSet};

use kmirror_crds::v1alpha1::FetcherEngine;
use kmirror_state::kafka_admin::AdminError;
use rdkafka::error::RDKafkaErrorCode;

use crate::config_fit::{self, Fitted};
use crate::error::Cause;
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

/// Creates the destination topic `topic` of `source_topic` with `partitions` (already existing
/// is fine: [`Creation::Existed`]). A config the broker refuses and names in its answer is left
/// out, remembered and noted; a broker that refuses an unnamed config while timestamp bounds
/// are sent gets the topic without the bounds, as its defaults have them. Any other refusal
/// names the configs sent and the broker's message.
pub async fn create(
    scope: &MirrorScope,
    source_topic: &str,
    topic: &str,
    partitions: i32,
) -> Result<Creation, Cause> {
    let destination = &scope.destination;
    let overrides = &scope.mirror.spec.sync.topic_configs.overrides;
    let Fitted {
        mut configs,
        mut not_copied,
    } = wanted(scope, source_topic, None).await?;
    let mut bounds_dropped = false;
    loop {
        let refusal =
            match kafka::create_topic_answer(destination, topic, partitions, &configs).await? {
                Ok(creation) => {
                    scope
                        .config_notes
                        .record(&scope.key, source_topic, not_copied);
                    return Ok(creation);
                }
                Err(e) => e,
            };
        let (code, message) = match &refusal {
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
