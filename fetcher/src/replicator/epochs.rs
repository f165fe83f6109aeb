//! Where a source leader epoch ends now (OffsetForLeaderEpoch, sent with the kmirror-wire
//! client: librdkafka validates positions with it internally but offers no call). A fetcher asks
//! only when something looks wrong — at start with the recorded epoch, and after the consumer
//! reported a reset — so the client is connected on first use, on a runtime of its own.

use std::time::Duration;

use kmirror_wire::{Client, EpochEnd, KafkaCode, WireConfig};
use rdkafka::ClientConfig;

/// Bound on one question, connecting included.
const TIMEOUT: Duration = Duration::from_secs(20);

/// The source's answers about leader epochs; `None` answers mean unknown (the source cannot be
/// asked with these settings, or did not answer) and make callers fall back to other checks.
pub(super) struct SourceEpochs {
    config: Option<WireConfig>,
    runtime: Option<tokio::runtime::Runtime>,
    client: Option<Client>,
}

impl SourceEpochs {
    /// Settings from the source consumer's configuration (secrets read through `get`, which
    /// rdkafka does not mask).
    pub(super) fn new(source: &ClientConfig) -> SourceEpochs {
        let pairs = source
            .config_map()
            .into_keys()
            .map(|k| (k, source.get(k).unwrap_or_default()));
        let config = match WireConfig::from_pairs(pairs) {
            Ok(c) => Some(c),
            Err(e) => {
                tracing::warn!(
                    "leader-epoch checks of the source are unavailable with these settings: {e}"
                );
                None
            }
        };
        SourceEpochs {
            config,
            runtime: None,
            client: None,
        }
    }

    /// Where epoch `epoch` of `topic`/`partition` ends on the source's leader now.
    pub(super) fn end_of(&mut self, topic: &str, partition: i32, epoch: i32) -> Option<EpochEnd> {
        if epoch < 0 {
            return None;
        }
        let config = self.config.clone()?;
        if self.runtime.is_none() {
            match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(r) => self.runtime = Some(r),
                Err(e) => {
                    tracing::warn!("no runtime for leader-epoch checks: {e}");
                    return None;
                }
            }
        }
        let runtime = self.runtime.as_ref().expect("created above");
        let client = self.client.clone();
        let asked = runtime.block_on(async move {
            tokio::time::timeout(TIMEOUT, async move {
                let client = match client {
                    Some(c) => c,
                    None => Client::connect(config).await?,
                };
                // A leader change right before the question: ask again after a refresh.
                let mut answer = client
                    .offset_for_leader_epoch(topic, &[(partition, epoch)])
                    .await?;
                for _ in 0..5 {
                    match answer.first() {
                        Some(a) if a.error.is_leader_change() || a.error.is_retriable() => {
                            tokio::time::sleep(Duration::from_millis(500)).await;
                            answer = client
                                .offset_for_leader_epoch(topic, &[(partition, epoch)])
                                .await?;
                        }
                        _ => break,
                    }
                }
                Ok::<_, kmirror_wire::WireError>((client, answer))
            })
            .await
        });
        match asked {
            Ok(Ok((client, answer))) => {
                self.client = Some(client);
                let end = answer.into_iter().next()?;
                if end.error != KafkaCode::NONE {
                    tracing::warn!(
                        partition,
                        epoch,
                        error = %end.error.name(),
                        "the source did not say where the leader epoch ends"
                    );
                    return None;
                }
                Some(end)
            }
            Ok(Err(e)) => {
                tracing::warn!(
                    partition,
                    epoch,
                    "asking the source where a leader epoch ends: {e}"
                );
                self.client = None;
                None
            }
            Err(_) => {
                tracing::warn!(
                    partition,
                    epoch,
                    "the source did not answer within {TIMEOUT:?}"
                );
                self.client = None;
                None
            }
        }
    }
}
