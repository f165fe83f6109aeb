//! Byte sizes written the Kubernetes way (`64Mi`, `1G`, `500000`), as in `resources.limits`.

use std::fmt;

/// A byte size that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{text:?} is not a byte size: {why} (e.g. 64Mi, 1Gi, 500M or 67108864)")]
pub struct BadByteSize {
    text: String,
    why: &'static str,
}

/// Parses `<integer>[suffix]`: binary suffixes `Ki Mi Gi Ti`, decimal `k M G T`, none for bytes.
/// Fractions and exponents, which Kubernetes also accepts, are refused: a budget is whole bytes.
pub fn parse_byte_size(text: &str) -> Result<u64, BadByteSize> {
    let bad = |why| BadByteSize {
        text: text.to_string(),
        why,
    };
    let t = text.trim();
    let digits = t.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return Err(bad("it does not start with a number"));
    }
    let (number, suffix) = t.split_at(digits);
    let factor: u64 = match suffix {
        "" => 1,
        "k" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        "T" => 1_000_000_000_000,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "Ti" => 1 << 40,
        _ => return Err(bad("unknown suffix")),
    };
    number
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(factor))
        .ok_or_else(|| bad("too large"))
}

/// A byte count shown in MiB with one decimal, for messages.
pub struct Mib(pub u64);

impl fmt::Display for Mib {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.1} MiB", self.0 as f64 / (1u64 << 20) as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_like_kubernetes_quantities() {
        for (text, bytes) in [
            ("67108864", 67_108_864),
            ("64Mi", 64 << 20),
            ("1Gi", 1 << 30),
            ("500M", 500_000_000),
            ("2k", 2_000),
            (" 3Ki ", 3_072),
        ] {
            assert_eq!(parse_byte_size(text), Ok(bytes), "{text}");
        }
        for text in ["", "Mi", "64MB", "1.5Gi", "-1", "1e6", "99999999999Ti"] {
            assert!(parse_byte_size(text).is_err(), "{text} must be refused");
        }
        assert!(
            parse_byte_size("64MB")
                .unwrap_err()
                .to_string()
                .contains("e.g. 64Mi")
        );
        assert_eq!(Mib(96 << 20).to_string(), "96.0 MiB");
    }
}
