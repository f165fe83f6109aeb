//! Whether a cluster can be a destination: kmirror writes only into Kafka 3.0 or later, judged by
//! the requests its brokers offer. A cluster older than that — a 2.x source a failback would
//! write into — is refused up front, naming its release, instead of failing at its first admin
//! request with a librdkafka "required feature not supported".

use std::collections::BTreeSet;
use std::time::Duration;

use kmirror_wire::releases::{at_least_3_0, release_floor};
use kmirror_wire::{Client, WireConfig};
use rdkafka::ClientConfig;

/// How long asking the brokers may take.
const ASK_TIMEOUT: Duration = Duration::from_secs(10);

/// Why brokers offering `keys` cannot be a destination, if they cannot.
pub fn refusal(keys: &BTreeSet<i16>) -> Option<String> {
    at_least_3_0(keys).err().map(|lacks| {
        format!(
            "the destination's brokers are Kafka {} (they do not offer {lacks}, added in Kafka 3.0): \
             kmirror writes only into Kafka 3.0 or later; a cluster this old can be a source but \
             not a destination, so a failback into it cannot run: upgrade it first",
            release_floor(keys)
        )
    })
}

/// Why a cluster could not be judged.
pub enum Unjudged {
    /// The brokers did not answer (within the timeout): ask again later.
    NoAnswer,
}

/// Asks the brokers of `config` which requests they offer and judges them (`Ok(None)`: a
/// destination kmirror can write into; also when the settings are ones only librdkafka takes,
/// which nothing here can judge).
pub async fn judge(config: &ClientConfig) -> Result<Option<String>, Unjudged> {
    let wire = match WireConfig::from_properties(&kmirror_state::connection::properties(config)) {
        Ok(wire) => wire,
        Err(e) => {
            tracing::info!(error = %e, "the destination's release is not checked: kmirror's own client does not take its settings");
            return Ok(None);
        }
    };
    let keys = tokio::time::timeout(ASK_TIMEOUT, async {
        Client::connect(wire).await?.broker_api_versions().await
    })
    .await;
    match keys {
        Ok(Ok(versions)) => Ok(refusal(&versions.into_keys().collect())),
        Ok(Err(e)) => {
            tracing::info!(error = %e, "the destination's brokers did not say which requests they offer");
            Err(Unjudged::NoAnswer)
        }
        Err(_) => {
            tracing::info!(timeout = ?ASK_TIMEOUT, "the destination's brokers did not say which requests they offer in time");
            Err(Unjudged::NoAnswer)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_before_3_0_are_refused_naming_the_release() {
        let kafka_2_1: BTreeSet<i16> = [0, 1, 2, 3, 42].into();
        let kafka_2_8: BTreeSet<i16> = [0, 1, 43, 44, 47, 48, 57, 61].into();
        let kafka_3_0: BTreeSet<i16> = [0, 1, 43, 44, 47, 48, 57, 61, 65, 66].into();
        let old = refusal(&kafka_2_1).expect("2.1 refused");
        assert!(
            old.contains("Kafka 2.1 or earlier") && old.contains("3.0"),
            "{old}"
        );
        assert!(
            refusal(&kafka_2_8)
                .expect("2.8 refused")
                .contains("Kafka 2.8 ")
        );
        assert_eq!(refusal(&kafka_3_0), None);
    }
}
