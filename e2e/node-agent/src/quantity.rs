//! Kubernetes resource quantities (`500m`, `1.5`, `128Mi`, `1e3`) as numbers, for the downward
//! API's `resourceFieldRef`.

use thiserror::Error;

/// A quantity that could not be parsed.
#[derive(Debug, Error, PartialEq, Eq)]
#[error("invalid quantity {0:?}")]
pub struct InvalidQuantity(pub String);

/// The value of a quantity as a float (`"500m"` is 0.5, `"1Ki"` is 1024).
pub fn parse(text: &str) -> Result<f64, InvalidQuantity> {
    let bad = || InvalidQuantity(text.to_string());
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(split);
    let number: f64 = number.parse().map_err(|_| bad())?;
    let scale = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024f64,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        exp if exp.starts_with(['e', 'E']) => {
            let power: i32 = exp[1..].parse().map_err(|_| bad())?;
            10f64.powi(power)
        }
        _ => return Err(bad()),
    };
    Ok(number * scale)
}

/// `value / divisor`, rounded up, as the downward API reports resources.
pub fn divide_ceil(value: f64, divisor: f64) -> i64 {
    if divisor <= 0.0 {
        return 0;
    }
    // Tolerate float noise such as 0.1 * 3 / 0.3 = 1.0000000000000002.
    let q = value / divisor;
    let rounded = q.round();
    if (q - rounded).abs() < 1e-9 {
        rounded as i64
    } else {
        q.ceil() as i64
    }
}

#[cfg(test)]
mod tests {
    use super::{divide_ceil, parse};

    #[test]
    fn parses_decimal_and_binary_suffixes() {
        assert_eq!(parse("500m").unwrap(), 0.5);
        assert_eq!(parse("2").unwrap(), 2.0);
        assert_eq!(parse("1.5").unwrap(), 1.5);
        assert_eq!(parse("128Mi").unwrap(), 134_217_728.0);
        assert_eq!(parse("1G").unwrap(), 1e9);
        assert_eq!(parse("1e3").unwrap(), 1000.0);
        assert!(parse("12x").is_err());
        assert!(parse("").is_err());
    }

    #[test]
    fn divides_rounding_up() {
        assert_eq!(divide_ceil(0.5, 1.0), 1);
        assert_eq!(divide_ceil(0.5, 0.001), 500);
        assert_eq!(divide_ceil(134_217_728.0, 1024.0 * 1024.0), 128);
        assert_eq!(divide_ceil(100.0, 3.0), 34);
        assert_eq!(divide_ceil(0.3, 0.1), 3);
    }
}
