//! What the destination topic accepts, read once at start from its effective configuration
//! (DescribeConfigs, broker defaults included): `max.message.bytes` and, on a CreateTime topic,
//! the timestamp bounds. Records are checked against them before they are produced — integer
//! compares, no allocation — so that a refused record stops its partition with the offset and
//! the limit instead of failing in the producer. Pure; the broker's refusals map to the same
//! [`Refusal`].

use std::fmt;

use rdkafka::error::RDKafkaErrorCode;

/// Bytes a single-record batch adds to the record's key, value and headers at the least (the
/// v2 batch header).
const BATCH_HEADER_BYTES: i64 = 61;

/// Why the destination refuses (or would refuse) a record, with the limit and the fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Larger than the topic's `max.message.bytes`.
    TooLarge {
        /// Bytes of key, value and headers.
        size: usize,
        /// The topic's `max.message.bytes`.
        limit: i64,
    },
    /// A timestamp further ahead of the clock than the topic allows.
    TooNew {
        /// The record's timestamp (ms).
        timestamp: i64,
        /// How far ahead of the fetcher's clock (ms).
        ahead_ms: i64,
        /// The config that bounds it.
        config: &'static str,
        /// Its value (ms).
        bound_ms: i64,
    },
    /// A timestamp older than the topic allows.
    TooOld {
        /// The record's timestamp (ms).
        timestamp: i64,
        /// How far behind the fetcher's clock (ms).
        behind_ms: i64,
        /// The config that bounds it.
        config: &'static str,
        /// Its value (ms).
        bound_ms: i64,
    },
    /// The destination's answer to the produce request.
    Broker {
        /// The error code.
        code: RDKafkaErrorCode,
        /// The limit that explains it, when known.
        hint: String,
    },
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::TooLarge { size, limit } => write!(
                f,
                "it is {size} bytes, over the topic's max.message.bytes {limit}: raise the \
                 destination topic's max.message.bytes to at least {}",
                *size as i64 + 1024
            ),
            Refusal::TooNew {
                timestamp,
                ahead_ms,
                config,
                bound_ms,
            } => write!(
                f,
                "its timestamp {timestamp} is {ahead_ms} ms ahead of the clock, beyond the topic's \
                 {config} {bound_ms}: raise {config} of the destination topic"
            ),
            Refusal::TooOld {
                timestamp,
                behind_ms,
                config,
                bound_ms,
            } => write!(
                f,
                "its timestamp {timestamp} is {behind_ms} ms old, beyond the topic's {config} \
                 {bound_ms}: raise {config} of the destination topic"
            ),
            Refusal::Broker { code, hint } if hint.is_empty() => {
                write!(f, "the destination answered {code:?}")
            }
            Refusal::Broker { code, hint } => {
                write!(f, "the destination answered {code:?} ({hint})")
            }
        }
    }
}

/// The destination topic's limits.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DestinationLimits {
    /// Effective `max.message.bytes`.
    pub max_message_bytes: Option<i64>,
    /// `message.timestamp.type` is CreateTime (bounds apply; LogAppendTime replaces timestamps).
    pub create_time: bool,
    /// How old a timestamp may be (ms), and the config that says so.
    pub before: Option<(i64, &'static str)>,
    /// How far ahead a timestamp may be (ms), and the config that says so.
    pub after: Option<(i64, &'static str)>,
    /// `cleanup.policy` has no `delete`: DeleteRecords is refused.
    pub compact_only: bool,
    /// Record sizes are checked before producing: only when the producer does not compress
    /// (a compressed batch may fit although its record does not; the broker decides).
    pub check_size: bool,
}

impl DestinationLimits {
    /// Limits from the topic's effective configs (`name`, `value`), as DescribeConfigs reports
    /// them. `compressing`: the producer compresses batches.
    pub fn from_configs<'a>(
        configs: impl IntoIterator<Item = (&'a str, Option<&'a str>)>,
        compressing: bool,
    ) -> DestinationLimits {
        let mut limits = DestinationLimits {
            create_time: true,
            check_size: !compressing,
            ..Default::default()
        };
        let mut difference = None;
        let bound = |v: Option<&str>| {
            v.and_then(|v| v.trim().parse::<i64>().ok())
                .filter(|b| (0..i64::MAX).contains(b))
        };
        for (name, value) in configs {
            match name {
                "max.message.bytes" => {
                    limits.max_message_bytes = value.and_then(|v| v.trim().parse().ok())
                }
                "message.timestamp.type" => {
                    limits.create_time = value.is_none_or(|v| v != "LogAppendTime")
                }
                "message.timestamp.before.max.ms" => {
                    limits.before = bound(value).map(|b| (b, "message.timestamp.before.max.ms"))
                }
                "message.timestamp.after.max.ms" => {
                    limits.after = bound(value).map(|b| (b, "message.timestamp.after.max.ms"))
                }
                "message.timestamp.difference.max.ms" => difference = Some(bound(value)),
                "cleanup.policy" => {
                    limits.compact_only = value.is_some_and(|v| !v.contains("delete"))
                }
                _ => {}
            }
        }
        // Brokers before 3.6 know only the difference (both directions); later ones use the
        // before/after bounds when they report them.
        if let Some(d) = difference
            && limits.before.is_none()
            && limits.after.is_none()
        {
            let d = d.map(|b| (b, "message.timestamp.difference.max.ms"));
            limits.before = d;
            limits.after = d;
        }
        limits
    }

    /// Checks a record of `size` bytes (key, value, headers) with timestamp `timestamp` (ms,
    /// `None`: none) against the limits at `now_ms`.
    #[inline]
    pub fn check(&self, size: usize, timestamp: Option<i64>, now_ms: i64) -> Result<(), Refusal> {
        if self.check_size
            && let Some(limit) = self.max_message_bytes
            && size as i64 + BATCH_HEADER_BYTES > limit
        {
            return Err(Refusal::TooLarge { size, limit });
        }
        if !self.create_time {
            return Ok(());
        }
        let Some(ts) = timestamp.filter(|&t| t >= 0) else {
            return Ok(());
        };
        if let Some((bound_ms, config)) = self.after
            && ts.saturating_sub(now_ms) > bound_ms
        {
            return Err(Refusal::TooNew {
                timestamp: ts,
                ahead_ms: ts - now_ms,
                config,
                bound_ms,
            });
        }
        if let Some((bound_ms, config)) = self.before
            && now_ms.saturating_sub(ts) > bound_ms
        {
            return Err(Refusal::TooOld {
                timestamp: ts,
                behind_ms: now_ms - ts,
                config,
                bound_ms,
            });
        }
        Ok(())
    }

    /// The refusal a failed delivery's error code stands for, if it is one (the record, not the
    /// connection): its size, its timestamp, or its form (e.g. no key on a compacted topic).
    pub fn refusal_for(
        &self,
        code: RDKafkaErrorCode,
        size: usize,
        timestamp: Option<i64>,
    ) -> Option<Refusal> {
        let hint = match code {
            RDKafkaErrorCode::MessageSizeTooLarge
            | RDKafkaErrorCode::MessageBatchTooLarge
            | RDKafkaErrorCode::InvalidMessageSize => match self.max_message_bytes {
                Some(limit) => format!(
                    "the record is {size} bytes, the topic's max.message.bytes {limit}: raise it"
                ),
                None => format!("the record is {size} bytes: raise the topic's max.message.bytes"),
            },
            RDKafkaErrorCode::InvalidTimestamp => {
                let bounds = [self.before, self.after]
                    .into_iter()
                    .flatten()
                    .map(|(b, c)| format!("{c} {b}"))
                    .collect::<Vec<_>>()
                    .join(", ");
                format!(
                    "timestamp {}; the topic's bounds: {}",
                    timestamp.map_or("none".to_string(), |t| t.to_string()),
                    if bounds.is_empty() {
                        "unknown"
                    } else {
                        &bounds
                    }
                )
            }
            RDKafkaErrorCode::InvalidRecord => {
                "the broker failed to validate the record (e.g. a compacted topic needs a key)"
                    .to_string()
            }
            _ => return None,
        };
        Some(Refusal::Broker { code, hint })
    }

    /// The producer's `batch.size` for this topic: batches never exceed `max.message.bytes`,
    /// so that only a single record too large for the topic can be refused (and named).
    pub fn batch_size(&self, wanted: i64) -> i64 {
        match self.max_message_bytes {
            Some(limit) => wanted.min((limit - 2 * BATCH_HEADER_BYTES).max(1024)),
            None => wanted,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_800_000_000_000;
    const HOUR: i64 = 3_600_000;

    fn kafka4(extra: &[(&'static str, &'static str)]) -> DestinationLimits {
        let mut configs = vec![
            ("max.message.bytes", Some("1048588")),
            ("message.timestamp.type", Some("CreateTime")),
            (
                "message.timestamp.before.max.ms",
                Some("9223372036854775807"),
            ),
            ("message.timestamp.after.max.ms", Some("3600000")),
            ("cleanup.policy", Some("delete")),
        ];
        for (k, v) in extra {
            configs.retain(|(n, _)| n != k);
            configs.push((k, Some(v)));
        }
        DestinationLimits::from_configs(configs, false)
    }

    fn kind(r: Result<(), Refusal>) -> &'static str {
        match r {
            Ok(()) => "ok",
            Err(Refusal::TooLarge { .. }) => "too large",
            Err(Refusal::TooNew { .. }) => "too new",
            Err(Refusal::TooOld { .. }) => "too old",
            Err(Refusal::Broker { .. }) => "broker",
        }
    }

    #[test]
    fn records_against_the_limits() {
        let big = 1_048_588 - 61;
        #[rustfmt::skip]
        let table: Vec<(&str, DestinationLimits, usize, Option<i64>, &str)> = vec![
            // name, limits, size, timestamp → outcome
            ("small, now", kafka4(&[]), 100, Some(NOW), "ok"),
            ("exactly fits", kafka4(&[]), big, Some(NOW), "ok"),
            ("one byte over", kafka4(&[]), big + 1, Some(NOW), "too large"),
            ("compressing: the broker decides", DestinationLimits { check_size: false, ..kafka4(&[]) }, 5_000_000, Some(NOW), "ok"),
            ("an hour ahead", kafka4(&[]), 10, Some(NOW + HOUR), "ok"),
            ("a week ahead", kafka4(&[]), 10, Some(NOW + 168 * HOUR), "too new"),
            ("ten years old, unbounded", kafka4(&[]), 10, Some(NOW - 87_600 * HOUR), "ok"),
            ("old, bounded before", kafka4(&[("message.timestamp.before.max.ms", "86400000")]), 10, Some(NOW - 25 * HOUR), "too old"),
            ("no timestamp", kafka4(&[]), 10, None, "ok"),
            ("LogAppendTime: no bounds", kafka4(&[("message.timestamp.type", "LogAppendTime")]), 10, Some(NOW + 168 * HOUR), "ok"),
            ("after unbounded", kafka4(&[("message.timestamp.after.max.ms", "9223372036854775807")]), 10, Some(NOW + 168 * HOUR), "ok"),
            ("old broker: difference both ways",
             DestinationLimits::from_configs([("message.timestamp.difference.max.ms", Some("60000"))], false), 10, Some(NOW - 61_000), "too old"),
            ("old broker: difference ahead",
             DestinationLimits::from_configs([("message.timestamp.difference.max.ms", Some("60000"))], false), 10, Some(NOW + 61_000), "too new"),
            ("old broker: default difference",
             DestinationLimits::from_configs([("message.timestamp.difference.max.ms", Some("9223372036854775807"))], false), 10, Some(0), "ok"),
            ("nothing known", DestinationLimits::from_configs([], false), 50_000_000, Some(NOW + 168 * HOUR), "ok"),
        ];
        for (name, limits, size, ts, expect) in table {
            assert_eq!(kind(limits.check(size, ts, NOW)), expect, "{name}");
        }
    }

    #[test]
    fn refusals_say_the_limit_and_the_fix() {
        let l = kafka4(&[]);
        let m = l.check(2_100_000, Some(NOW), NOW).unwrap_err().to_string();
        assert!(m.contains("2100000 bytes"), "{m}");
        assert!(m.contains("max.message.bytes 1048588"), "{m}");
        assert!(m.contains("at least 2101024"), "{m}");
        let m = l
            .check(10, Some(NOW + 48 * HOUR), NOW)
            .unwrap_err()
            .to_string();
        assert!(m.contains("message.timestamp.after.max.ms 3600000"), "{m}");
        assert!(m.contains(&format!("{} ms ahead", 48 * HOUR)), "{m}");
        let m = l
            .refusal_for(RDKafkaErrorCode::MessageSizeTooLarge, 500_000, None)
            .unwrap()
            .to_string();
        assert!(
            m.contains("MessageSizeTooLarge") && m.contains("1048588"),
            "{m}"
        );
        assert!(
            l.refusal_for(RDKafkaErrorCode::RequestTimedOut, 1, None)
                .is_none(),
            "a timeout is not a refusal"
        );
        assert!(
            l.refusal_for(RDKafkaErrorCode::InvalidTimestamp, 1, Some(NOW))
                .unwrap()
                .to_string()
                .contains("message.timestamp.after.max.ms 3600000")
        );
    }

    #[test]
    fn topic_facts() {
        assert!(kafka4(&[("cleanup.policy", "compact")]).compact_only);
        assert!(!kafka4(&[("cleanup.policy", "compact,delete")]).compact_only);
        assert!(!kafka4(&[]).compact_only);
        assert_eq!(kafka4(&[]).batch_size(1_000_000), 1_000_000);
        assert_eq!(
            kafka4(&[("max.message.bytes", "200000")]).batch_size(1_000_000),
            200_000 - 122
        );
        assert!(
            DestinationLimits::from_configs([], true)
                .max_message_bytes
                .is_none()
        );
    }
}
