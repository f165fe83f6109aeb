//! The destination topic's configs, at its creation and at every config sync: the source
//! topic's non-excluded configs and its effective `max.message.bytes`, the timestamp bounds the
//! destination broker knows, and the spec's overrides (see [`topic_configs::destination_configs`]).

use std::collections::{BTreeMap, BTreeSet};

use kmirror_crds::v1alpha1::FetcherEngine;
use rdkafka::error::RDKafkaErrorCode;

use crate::error::Cause;
use crate::kafka::{self, Creation, TopicConfigs};
use crate::scope::MirrorScope;
use crate::topic_configs::{self, Inputs};

/// The configs the destination topic of `source_topic` should have, given what it has now
/// (`None`: it is about to be created).
pub async fn wanted(
    scope: &MirrorScope,
    source_topic: &str,
    now: Option<&TopicConfigs>,
) -> Result<BTreeMap<String, String>, Cause> {
    let sync = &scope.mirror.spec.sync.topic_configs;
    let source = kafka::describe_topic_configs(&scope.source, source_topic).await?;
    let known: BTreeSet<String> = match now {
        Some(now) => now.effective.keys().cloned().collect(),
        None => known_topic_configs(scope).await,
    };
    let empty = BTreeMap::new();
    Ok(topic_configs::destination_configs(&Inputs {
        source: if sync.enabled {
            &source.dynamic
        } else {
            &empty
        },
        source_max_message_bytes: source.max_message_bytes(),
        exclude: &sync.exclude,
        overrides: &sync.overrides,
        destination: now.map_or(&empty, |n| &n.dynamic),
        known: &known,
        keeps_batch_codec: scope.mirror.spec.fetcher.engine == FetcherEngine::Batch,
    }))
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

/// Creates the destination topic `topic` of `source_topic` with `partitions` (already existing
/// is fine: [`Creation::Existed`]). A broker that refuses a timestamp bound it does not know
/// gets the topic without the bounds, as its defaults have them.
pub async fn create(
    scope: &MirrorScope,
    source_topic: &str,
    topic: &str,
    partitions: i32,
) -> Result<Creation, Cause> {
    let destination = &scope.destination;
    let mut configs = wanted(scope, source_topic, None).await?;
    let mut answer = kafka::create_topic_answer(destination, topic, partitions, &configs).await?;
    if answer == Err(RDKafkaErrorCode::InvalidConfig)
        && configs.keys().any(|k| topic_configs::is_timestamp_bound(k))
    {
        let overridden = &scope.mirror.spec.sync.topic_configs.overrides;
        configs.retain(|k, _| {
            !topic_configs::is_timestamp_bound(k) || overridden.contains_key(k.as_str())
        });
        tracing::warn!(
            topic,
            "the destination refused a timestamp bound: creating the topic with its defaults"
        );
        answer = kafka::create_topic_answer(destination, topic, partitions, &configs).await?;
    }
    answer.map_err(|code| {
        destination
            .error(format!("creating topic {topic}: {code:?}"))
            .into()
    })
}
