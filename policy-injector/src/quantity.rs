//! Kubernetes-style quantities: byte sizes ("512Mi", "1G", "1024"), CPU in millicores ("500m",
//! "2", "0.5") and durations ("90s", "1h30m"). Parsing is exact integer arithmetic: a value
//! that is not a whole number of bytes or millicores is an error, not a rounding.

use std::fmt;
use std::time::Duration;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A size in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ByteSize(pub u64);

/// CPU in millicores (1000 = one CPU).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MilliCpu(pub u64);

/// A duration written as `1h30m`, `90s`, `500ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HumanDuration(pub Duration);

/// A number as written: integer part and fractional digits, no sign, no exponent.
struct Decimal {
    int: u128,
    frac: u128,
    frac_digits: u32,
}

fn split_number(s: &str) -> Result<(Decimal, &str), String> {
    if s.starts_with('-') {
        return Err("negative values are not allowed".into());
    }
    let s = s.strip_prefix('+').unwrap_or(s);
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, suffix) = s.split_at(end);
    let (int_s, frac_s) = match num.split_once('.') {
        Some((i, f)) => (i, f),
        None => (num, ""),
    };
    if int_s.is_empty() && frac_s.is_empty() {
        return Err("no number".into());
    }
    if frac_s.contains('.') {
        return Err("more than one decimal point".into());
    }
    if frac_s.len() > 18 || int_s.len() > 30 {
        return Err("too many digits".into());
    }
    let parse = |d: &str| -> Result<u128, String> {
        if d.is_empty() {
            Ok(0)
        } else {
            d.parse::<u128>().map_err(|e| e.to_string())
        }
    };
    Ok((
        Decimal {
            int: parse(int_s)?,
            frac: parse(frac_s)?,
            frac_digits: frac_s.len() as u32,
        },
        suffix,
    ))
}

/// `number * mult`, exactly, or an error when the result is fractional or above `u64::MAX`.
fn scale(d: &Decimal, mult: u128, unit: &str) -> Result<u64, String> {
    let denom = 10u128.pow(d.frac_digits);
    let whole = d
        .int
        .checked_mul(denom)
        .and_then(|v| v.checked_add(d.frac))
        .and_then(|v| v.checked_mul(mult))
        .ok_or("value too large")?;
    if whole % denom != 0 {
        return Err(format!("not a whole number of {unit}"));
    }
    u64::try_from(whole / denom).map_err(|_| "value too large".to_string())
}

impl std::str::FromStr for ByteSize {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        let (num, suffix) = split_number(s)?;
        let mult: u128 = match suffix {
            "" => 1,
            "Ki" => 1 << 10,
            "Mi" => 1 << 20,
            "Gi" => 1 << 30,
            "Ti" => 1 << 40,
            "Pi" => 1 << 50,
            "Ei" => 1 << 60,
            "k" => 1_000,
            "M" => 1_000_000,
            "G" => 1_000_000_000,
            "T" => 1_000_000_000_000,
            "P" => 1_000_000_000_000_000,
            "E" => 1_000_000_000_000_000_000,
            other => {
                return Err(format!(
                    "unknown size suffix {other:?} (use Ki, Mi, Gi, Ti, Pi, Ei, k, M, G, T, P, E or none)"
                ))
            }
        };
        scale(&num, mult, "bytes").map(ByteSize)
    }
}

impl fmt::Display for ByteSize {
    /// Canonical form: the largest binary suffix that divides exactly, else plain bytes.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [(&str, u32); 6] = [
            ("Ei", 60),
            ("Pi", 50),
            ("Ti", 40),
            ("Gi", 30),
            ("Mi", 20),
            ("Ki", 10),
        ];
        if self.0 != 0 {
            for (name, shift) in UNITS {
                if self.0.is_multiple_of(1u64 << shift) {
                    return write!(f, "{}{name}", self.0 >> shift);
                }
            }
        }
        write!(f, "{}", self.0)
    }
}

impl std::str::FromStr for MilliCpu {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        let (num, suffix) = split_number(s)?;
        let mult = match suffix {
            "" => 1000,
            "m" => 1,
            other => {
                return Err(format!(
                    "unknown CPU suffix {other:?} (use \"500m\" for millicores or \"2\" for CPUs)"
                ))
            }
        };
        scale(&num, mult, "millicores").map(MilliCpu)
    }
}

impl fmt::Display for MilliCpu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_multiple_of(1000) {
            write!(f, "{}", self.0 / 1000)
        } else {
            write!(f, "{}m", self.0)
        }
    }
}

impl std::str::FromStr for HumanDuration {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        if s.starts_with('-') {
            return Err("negative durations are not allowed".into());
        }
        if s.is_empty() {
            return Err("empty duration".into());
        }
        let mut rest = s;
        let mut total_ms: u128 = 0;
        let mut last_rank = u8::MAX;
        while !rest.is_empty() {
            let digits = rest
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(rest.len());
            if digits == 0 {
                return Err(format!("expected a number in {s:?}"));
            }
            let n: u128 = rest[..digits]
                .parse()
                .map_err(|_| "value too large".to_string())?;
            rest = &rest[digits..];
            let unit_len = rest
                .find(|c: char| c.is_ascii_digit())
                .unwrap_or(rest.len());
            let (unit, tail) = rest.split_at(unit_len);
            // Units must appear largest first and at most once: "1h30m", not "30m1h".
            let (ms, rank) = match unit {
                "h" => (3_600_000, 3),
                "m" => (60_000, 2),
                "s" => (1_000, 1),
                "ms" => (1, 0),
                "" => return Err(format!("missing unit in {s:?} (use h, m, s or ms)")),
                other => {
                    return Err(format!(
                        "unknown duration unit {other:?} (use h, m, s or ms)"
                    ))
                }
            };
            if rank >= last_rank {
                return Err(format!("units out of order or repeated in {s:?}"));
            }
            last_rank = rank;
            total_ms = n
                .checked_mul(ms)
                .and_then(|v| v.checked_add(total_ms))
                .ok_or("value too large")?;
            rest = tail;
        }
        let ms = u64::try_from(total_ms).map_err(|_| "value too large".to_string())?;
        Ok(HumanDuration(Duration::from_millis(ms)))
    }
}

impl fmt::Display for HumanDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let total = self.0.as_millis();
        if total == 0 {
            return f.write_str("0s");
        }
        let (h, rem) = (total / 3_600_000, total % 3_600_000);
        let (m, rem) = (rem / 60_000, rem % 60_000);
        let (s, ms) = (rem / 1000, rem % 1000);
        for (n, unit) in [(h, "h"), (m, "m"), (s, "s"), (ms, "ms")] {
            if n != 0 {
                write!(f, "{n}{unit}")?;
            }
        }
        Ok(())
    }
}

macro_rules! serde_as_string {
    ($ty:ty, $expecting:expr, $from_u64:expr, $from_f64:expr) => {
        impl Serialize for $ty {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }

        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl<'de> Visitor<'de> for V {
                    type Value = $ty;
                    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                        f.write_str($expecting)
                    }
                    fn visit_str<E: de::Error>(self, v: &str) -> Result<$ty, E> {
                        v.parse().map_err(E::custom)
                    }
                    fn visit_i64<E: de::Error>(self, v: i64) -> Result<$ty, E> {
                        if v < 0 {
                            return Err(E::custom("negative values are not allowed"));
                        }
                        self.visit_u64(v as u64)
                    }
                    fn visit_u64<E: de::Error>(self, v: u64) -> Result<$ty, E> {
                        let f: fn(u64) -> Result<$ty, String> = $from_u64;
                        f(v).map_err(E::custom)
                    }
                    fn visit_f64<E: de::Error>(self, v: f64) -> Result<$ty, E> {
                        let f: fn(f64) -> Result<$ty, String> = $from_f64;
                        f(v).map_err(E::custom)
                    }
                }
                d.deserialize_any(V)
            }
        }
    };
}

serde_as_string!(
    ByteSize,
    "a size such as \"512Mi\", \"2Gi\", \"1G\" or a number of bytes",
    |v| Ok(ByteSize(v)),
    |_| Err("write sizes as strings such as \"1.5Gi\", not floats".to_string())
);
serde_as_string!(
    MilliCpu,
    "a CPU quantity such as \"500m\", \"2\" or \"0.5\"",
    |v| v
        .checked_mul(1000)
        .map(MilliCpu)
        .ok_or_else(|| "value too large".to_string()),
    |v| format!("{v}").parse::<MilliCpu>()
);
serde_as_string!(
    HumanDuration,
    "a duration such as \"90s\", \"10m\", \"1h\" or \"1h30m\"",
    |_| Err("write durations with a unit, such as \"90s\"".to_string()),
    |_| Err("write durations with a unit, such as \"90s\"".to_string())
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_sizes_parse_binary_decimal_and_plain() {
        let cases = [
            ("512Mi", 512 << 20),
            ("2Gi", 2 << 30),
            ("1G", 1_000_000_000),
            ("100M", 100_000_000),
            ("1024", 1024),
            ("1.5Gi", 3 << 29),
            ("0", 0),
            ("1Ei", 1 << 60),
        ];
        for (s, want) in cases {
            assert_eq!(s.parse::<ByteSize>(), Ok(ByteSize(want)), "{s}");
        }
    }

    #[test]
    fn byte_sizes_reject_garbage() {
        for s in [
            "-1Gi",
            "1Xi",
            "1.0000001",
            "Gi",
            "",
            "1..2",
            "99999Ei",
            "1e3",
            "512m",
        ] {
            assert!(s.parse::<ByteSize>().is_err(), "{s} should not parse");
        }
    }

    #[test]
    fn byte_size_display_round_trips() {
        for v in [0u64, 1, 1023, 1024, 3 << 29, 1_000_000_000, u64::MAX] {
            let b = ByteSize(v);
            assert_eq!(b.to_string().parse::<ByteSize>(), Ok(b));
        }
        assert_eq!(ByteSize(2 << 30).to_string(), "2Gi");
    }

    #[test]
    fn cpu_parses_millicores_and_cores() {
        for (s, want) in [
            ("500m", 500),
            ("2", 2000),
            ("0.5", 500),
            ("0.001", 1),
            ("1.5", 1500),
        ] {
            assert_eq!(s.parse::<MilliCpu>(), Ok(MilliCpu(want)), "{s}");
        }
        for s in ["-1", "0.0005", "2k", "m", "1Gi"] {
            assert!(s.parse::<MilliCpu>().is_err(), "{s} should not parse");
        }
        assert_eq!(MilliCpu(2000).to_string(), "2");
        assert_eq!(MilliCpu(1500).to_string(), "1500m");
    }

    #[test]
    fn durations_parse_compound_units_in_order() {
        let d = |s: &str| s.parse::<HumanDuration>().map(|h| h.0);
        assert_eq!(d("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(d("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(d("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(d("250ms"), Ok(Duration::from_millis(250)));
        for s in ["", "10", "1d", "30m1h", "1h1h", "-5s", "s", "1.5h"] {
            assert!(d(s).is_err(), "{s} should not parse");
        }
        assert_eq!(
            HumanDuration(Duration::from_secs(5400)).to_string(),
            "1h30m"
        );
        assert_eq!(HumanDuration(Duration::ZERO).to_string(), "0s");
    }
}
