//! Duration strings of the API (`30s`, `1m30s`, `250ms`, `2h`).

use std::time::Duration;

use thiserror::Error;

/// A duration string that does not parse.
#[derive(Debug, Error, PartialEq, Eq)]
#[error("invalid duration {0:?}: expected e.g. 30s, 1m30s, 250ms or 2h")]
pub struct DurationError(pub String);

/// Parses a sequence of `<digits><unit>` with unit `ms`, `s`, `m` or `h`.
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let err = || DurationError(text.to_string());
    let mut rest = text;
    let mut total = Duration::ZERO;
    if rest.is_empty() {
        return Err(err());
    }
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).ok_or_else(err)?;
        if digits == 0 {
            return Err(err());
        }
        let value: u64 = rest[..digits].parse().map_err(|_| err())?;
        rest = &rest[digits..];
        let (unit, len) = if rest.starts_with("ms") {
            (Duration::from_millis(1), 2)
        } else if rest.starts_with('s') {
            (Duration::from_secs(1), 1)
        } else if rest.starts_with('m') {
            (Duration::from_secs(60), 1)
        } else if rest.starts_with('h') {
            (Duration::from_secs(3600), 1)
        } else {
            return Err(err());
        };
        let value = u32::try_from(value).map_err(|_| err())?;
        total = total.checked_add(unit * value).ok_or_else(err)?;
        rest = &rest[len..];
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units_and_sums() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(
            parse_duration("1h1m1s1ms"),
            Ok(Duration::from_millis(3_661_001))
        );
    }

    #[test]
    fn rejects_garbage() {
        for bad in ["", "s", "10", "10x", "1.5s", "-1s", "m1", "99999999999s"] {
            assert!(parse_duration(bad).is_err(), "{bad:?} must be rejected");
        }
    }
}
