//! The destination leader's own log end (ListOffsets with the debugging replica id, sent with the
//! kmirror-wire client): at start a fetcher settles on the log end every in-sync replica agrees
//! on — the leader's log end equal to the high watermark — not only on a high watermark that
//! stopped moving. Connected on first use, on a runtime of its own; `None` answers mean unknown
//! (and the caller waits longer instead).

use std::time::Duration;

use kmirror_wire::{Client, KafkaCode, WireConfig};
use rdkafka::ClientConfig;

/// Bound on one question, connecting included.
const TIMEOUT: Duration = Duration::from_secs(15);

/// Asks the destination's partition leaders for their log end.
pub(super) struct DestinationLogEnds {
    config: Option<WireConfig>,
    runtime: Option<tokio::runtime::Runtime>,
    client: Option<Client>,
}

impl DestinationLogEnds {
    /// Settings from the destination client configuration (secrets read through `get`).
    pub(super) fn new(destination: &ClientConfig) -> DestinationLogEnds {
        let pairs = destination
            .config_map()
            .into_keys()
            .map(|k| (k, destination.get(k).unwrap_or_default()));
        let config = match WireConfig::from_pairs(pairs) {
            Ok(c) => Some(c),
            Err(e) => {
                tracing::warn!(
                    "the destination leader's log end cannot be read with these settings: {e}"
                );
                None
            }
        };
        DestinationLogEnds {
            config,
            runtime: None,
            client: None,
        }
    }

    /// The log end offset of the leader of `topic`/`partition`, when it answers.
    pub(super) fn end_of(&mut self, topic: &str, partition: i32) -> Option<i64> {
        let config = self.config.clone()?;
        if self.runtime.is_none() {
            self.runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| tracing::warn!("no runtime for reading the log end: {e}"))
                .ok();
        }
        let runtime = self.runtime.as_ref()?;
        let client = self.client.clone();
        let asked = runtime.block_on(async move {
            tokio::time::timeout(TIMEOUT, async move {
                let client = match client {
                    Some(c) => c,
                    None => Client::connect(config).await?,
                };
                let answer = client.log_ends(topic, &[partition]).await?;
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
                        error = %end.error.name(),
                        "the destination leader did not say where its log ends"
                    );
                    return None;
                }
                Some(end.offset)
            }
            Ok(Err(e)) => {
                tracing::warn!(partition, "reading the destination leader's log end: {e}");
                self.client = None;
                None
            }
            Err(_) => {
                tracing::warn!(
                    partition,
                    "the destination leader did not answer within {TIMEOUT:?}"
                );
                self.client = None;
                None
            }
        }
    }
}
