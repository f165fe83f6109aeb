//! Fencing of operator-written state records: which operator process owns a mirror's records,
//! and which records a reader must ignore because an operator that no longer owns them wrote
//! them (a zombie leader: frozen, partitioned, or overlapping a new one).
//!
//! An operator **claims** a mirror before it writes any of the mirror's records: it appends a
//! `claim` record (key kind `claim`, the mirror, topic "" and partition -1) naming itself, and
//! the **offset** of that record in the state topic (one partition, so offsets order every
//! record) is its fencing token for that mirror. Every record it writes afterwards — lifecycle
//! states, ACL records, tombstones — carries the token in the header [`FENCE_HEADER`]. Readers
//! apply the claims in log order:
//!
//! - a record whose token is lower than the mirror's latest claim **read so far** was written by
//!   an operator that had been superseded when the record reached the log: it is ignored;
//! - records without the header (fetchers' positions and maps, records of older versions) and
//!   records written before a newer claim are applied as always.
//!
//! The writer checks its own claim before each write too (refused on write), but a check and a
//! write are not atomic: the read-side rule is what makes a late write harmless. The operator
//! holding the latest claim rewrites its own value over an ignored record, so that compaction
//! (which keeps the latest record of a key) cannot keep the zombie's instead.

use std::collections::BTreeMap;

use rdkafka::message::{Header, Headers, OwnedHeaders};
use serde::{Deserialize, Serialize};

use crate::records::{RecordKind, StateKey};

/// The record header holding the writer's fencing token (decimal offset of its claim).
pub const FENCE_HEADER: &str = "kmirror-fence";

/// The value of a `claim` record.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct OperatorClaim {
    /// Format version.
    pub v: u8,
    /// The claiming operator (pod name, or host and process).
    pub identity: String,
    /// Unique per operator process: tells a process its own claim from a restarted one's.
    pub nonce: String,
    /// When it claimed (information only).
    pub claimed_at_ms: i64,
}

/// The claim in force for a mirror, as read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claim {
    /// The fencing token: the offset of the claim record.
    pub token: i64,
    /// Who claimed.
    pub identity: String,
    /// The claiming process's nonce.
    pub nonce: String,
}

/// What a reader does with one record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Admission {
    /// A claim: recorded; nothing else to apply.
    Claim,
    /// An ordinary record: apply it.
    Apply,
    /// Written by a superseded operator: ignore it.
    Stale {
        /// The record's token.
        token: i64,
        /// The mirror's claim in force.
        current: i64,
    },
}

/// The claims read so far, per mirror.
#[derive(Clone, Debug, Default)]
pub struct Fences {
    claims: BTreeMap<String, Claim>,
}

impl Fences {
    /// Decides what to do with the record at `offset` (`token`: its fence header, if any) and
    /// records it when it is a claim. Call in log order.
    pub fn admit(
        &mut self,
        key: &StateKey,
        offset: i64,
        token: Option<i64>,
        value: Option<&[u8]>,
    ) -> Admission {
        if key.kind == RecordKind::Claim {
            // A tombstone or an unreadable claim leaves the last claim in force.
            if let Some(claim) = value.and_then(|v| serde_json::from_slice::<OperatorClaim>(v).ok())
            {
                self.claims.insert(
                    key.mirror.clone(),
                    Claim {
                        token: offset,
                        identity: claim.identity,
                        nonce: claim.nonce,
                    },
                );
            }
            return Admission::Claim;
        }
        match (token, self.claims.get(&key.mirror)) {
            (Some(token), Some(claim)) if token < claim.token => Admission::Stale {
                token,
                current: claim.token,
            },
            _ => Admission::Apply,
        }
    }

    /// The claim in force for `mirror`.
    pub fn current(&self, mirror: &str) -> Option<&Claim> {
        self.claims.get(mirror)
    }
}

/// The fencing token in a record's headers.
pub fn token_of<H: Headers + ?Sized>(headers: Option<&H>) -> Option<i64> {
    let headers = headers?;
    (0..headers.count())
        .map(|i| headers.get(i))
        .find(|h| h.key == FENCE_HEADER)
        .and_then(|h| h.value)
        .and_then(|v| std::str::from_utf8(v).ok())
        .and_then(|s| s.parse().ok())
}

/// Headers carrying `token`.
pub fn headers_for(token: i64) -> OwnedHeaders {
    OwnedHeaders::new().insert(Header {
        key: FENCE_HEADER,
        value: Some(token.to_string().as_bytes()),
    })
}

/// A claim record's value for this process.
pub fn claim_value(identity: &str, nonce: &str) -> Vec<u8> {
    serde_json::to_vec(&OperatorClaim {
        v: 1,
        identity: identity.to_string(),
        nonce: nonce.to_string(),
        claimed_at_ms: crate::records::now_ms(),
    })
    .expect("claims serialize")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(identity: &str) -> Vec<u8> {
        claim_value(identity, &format!("{identity}-nonce"))
    }

    fn state(mirror: &str) -> StateKey {
        StateKey::new(RecordKind::State, mirror, "orders", 0)
    }

    /// A state topic's records in order: key, fence token, value.
    type Log = Vec<(StateKey, Option<i64>, Option<Vec<u8>>)>;

    /// Reads a log in order and returns the admissions.
    fn read(log: &Log) -> Vec<Admission> {
        let mut fences = Fences::default();
        log.iter()
            .enumerate()
            .map(|(offset, (k, token, v))| fences.admit(k, offset as i64, *token, v.as_deref()))
            .collect()
    }

    #[test]
    fn records_of_a_superseded_operator_are_ignored_after_the_newer_claim() {
        let a = StateKey::claim("ns/m");
        let stale = Admission::Stale {
            token: 0,
            current: 2,
        };
        let cases: Vec<(&str, Log, Vec<Admission>)> = vec![
            (
                "before any claim, fenced or not, everything applies",
                vec![(state("ns/m"), Some(7), None), (state("ns/m"), None, None)],
                vec![Admission::Apply, Admission::Apply],
            ),
            (
                "A's records before B's claim apply; A's after it do not; B's do",
                vec![
                    (a.clone(), None, Some(claim("a"))),
                    (state("ns/m"), Some(0), None),
                    (a.clone(), None, Some(claim("b"))),
                    (state("ns/m"), Some(0), None),
                    (state("ns/m"), Some(2), None),
                ],
                vec![
                    Admission::Claim,
                    Admission::Apply,
                    Admission::Claim,
                    stale.clone(),
                    Admission::Apply,
                ],
            ),
            (
                "tombstones carry the token too",
                vec![
                    (a.clone(), None, Some(claim("a"))),
                    (a.clone(), None, None),
                    (a.clone(), None, Some(claim("b"))),
                    (state("ns/m"), Some(0), None),
                ],
                vec![
                    Admission::Claim,
                    Admission::Claim,
                    Admission::Claim,
                    stale.clone(),
                ],
            ),
            (
                "records without a token (fetchers) always apply",
                vec![
                    (a.clone(), None, Some(claim("a"))),
                    (a.clone(), None, Some(claim("b"))),
                    (
                        StateKey::new(RecordKind::Position, "ns/m", "orders", 0),
                        None,
                        None,
                    ),
                ],
                vec![Admission::Claim, Admission::Claim, Admission::Apply],
            ),
            (
                "claims are per mirror",
                vec![
                    (a.clone(), None, Some(claim("a"))),
                    (StateKey::claim("ns/other"), None, Some(claim("b"))),
                    (state("ns/m"), Some(0), None),
                ],
                vec![Admission::Claim, Admission::Claim, Admission::Apply],
            ),
            (
                "an earlier claim compacted away: records of the claim in force apply",
                vec![
                    (state("ns/m"), Some(5), None),
                    (a.clone(), None, Some(claim("b"))),
                    (state("ns/m"), Some(1), None),
                ],
                vec![Admission::Apply, Admission::Claim, Admission::Apply],
            ),
        ];
        for (name, log, expected) in cases {
            assert_eq!(read(&log), expected, "{name}");
        }
    }

    #[test]
    fn the_latest_claim_names_its_process() {
        let mut fences = Fences::default();
        let k = StateKey::claim("ns/m");
        fences.admit(&k, 4, None, Some(&claim_value("op-a", "n1")));
        fences.admit(&k, 9, None, Some(&claim_value("op-b", "n2")));
        fences.admit(&k, 10, None, None);
        fences.admit(&k, 11, None, Some(b"not json"));
        let c = fences.current("ns/m").unwrap();
        assert_eq!(
            (c.token, c.identity.as_str(), c.nonce.as_str()),
            (9, "op-b", "n2")
        );
        assert!(fences.current("ns/other").is_none());
    }

    #[test]
    fn tokens_round_trip_through_headers() {
        use rdkafka::message::{Message, OwnedMessage, Timestamp};
        let m = OwnedMessage::new(
            None,
            None,
            "t".into(),
            Timestamp::NotAvailable,
            0,
            0,
            Some(headers_for(1234)),
        );
        assert_eq!(token_of(m.headers()), Some(1234));
    }
}
