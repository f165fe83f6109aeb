//! Small pure helpers: object names, durations, timestamps.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Longest name this plugin gives an object: the names end up in label values (63 at most).
pub const MAX_NAME: usize = 63;

/// FNV-1a (64 bit), for short stable name suffixes.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Makes `raw` a valid object name of at most [`MAX_NAME`] characters (a DNS-1123 label):
/// lowercase, other characters replaced by `-`. A name that had to be changed or shortened
/// gets a hash of `raw` as suffix, so different inputs stay different.
pub fn object_name(raw: &str) -> String {
    let clean: String = raw
        .chars()
        .map(|c| match c {
            'a'..='z' | '0'..='9' | '-' => c,
            'A'..='Z' => c.to_ascii_lowercase(),
            _ => '-',
        })
        .collect();
    let clean = clean.trim_matches('-');
    if clean == raw && clean.len() <= MAX_NAME {
        return clean.to_string();
    }
    let hash = format!("{:08x}", fnv1a(raw.as_bytes()) as u32);
    let keep = clean.len().min(MAX_NAME - hash.len() - 1);
    let head = clean[..keep].trim_end_matches('-');
    if head.is_empty() {
        format!("x-{hash}")
    } else {
        format!("{head}-{hash}")
    }
}

/// Checks a user-chosen object name: a DNS-1123 label of at most [`MAX_NAME`] characters.
pub fn check_name(name: &str) -> Result<(), String> {
    let valid_chars = name
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if name.is_empty()
        || name.len() > MAX_NAME
        || !valid_chars
        || name.starts_with('-')
        || name.ends_with('-')
    {
        return Err(format!(
            "invalid name {name:?}: use at most {MAX_NAME} lowercase letters, digits and '-', \
             starting and ending with a letter or digit"
        ));
    }
    Ok(())
}

/// A duration as people write it: `90s` → `1m30s`, `300ms`, `2h`.
pub fn format_duration(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        return format!("{}ms", d.as_millis());
    }
    let total = d.as_secs();
    let (h, m, s) = (total / 3600, (total % 3600) / 60, total % 60);
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if m > 0 {
        out.push_str(&format!("{m}m"));
    }
    if s > 0 || out.is_empty() {
        out.push_str(&format!("{s}s"));
    }
    out
}

/// RFC 3339 UTC timestamp with nanoseconds, e.g. `2026-03-01T12:00:00.123456789Z`.
pub fn rfc3339(t: SystemTime) -> String {
    let since = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (proleptic Gregorian calendar).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:09}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60,
        since.subsec_nanos()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_stay_valid_and_distinct() {
        assert_eq!(
            object_name("dr-failback-dr-orders"),
            "dr-failback-dr-orders"
        );
        let long = format!("{}-failback", "m".repeat(70));
        let a = object_name(&long);
        assert!(a.len() <= MAX_NAME && check_name(&a).is_ok(), "{a}");
        let b = object_name(&format!("{}-failbacl", "m".repeat(70)));
        assert_ne!(a, b);
        let c = object_name("Dr_Orders.v2");
        assert!(check_name(&c).is_ok(), "{c}");
        assert!(c.starts_with("dr-orders-v2-"), "{c}");
        assert!(check_name(&object_name("___")).is_ok());
        assert!(check_name("Bad").is_err());
        assert!(check_name("-x").is_err());
        assert!(check_name(&"a".repeat(64)).is_err());
        assert!(check_name("dr-failback").is_ok());
    }

    #[test]
    fn durations() {
        assert_eq!(format_duration(Duration::from_secs(90)), "1m30s");
        assert_eq!(format_duration(Duration::from_secs(300)), "5m");
        assert_eq!(format_duration(Duration::from_secs(7200)), "2h");
        assert_eq!(format_duration(Duration::from_millis(250)), "250ms");
        assert_eq!(format_duration(Duration::ZERO), "0ms");
    }

    #[test]
    fn timestamps() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000000000Z");
        let t = UNIX_EPOCH + Duration::new(1_709_294_400, 5);
        assert_eq!(rfc3339(t), "2024-03-01T12:00:00.000000005Z");
        let t = UNIX_EPOCH + Duration::from_secs(951_782_400); // leap day 2000
        assert_eq!(rfc3339(t), "2000-02-29T00:00:00.000000000Z");
    }
}
