//! Sizes and counts as people write them on the command line and in `[tool.fixgate]`: `500M`,
//! `2G`, `1.5G`, `800K`, plain bytes, and `unlimited` where a bound may be lifted.

/// Bytes of `500M`, `2g`, `1.5G`, `800K`, `1T`, `64B` or `1048576`; `None` for anything else.
pub(crate) fn parse_size(s: &str) -> Option<u64> {
    let t = s.trim();
    let (num, mult) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let mult: u64 = match c.to_ascii_uppercase() {
                'K' => 1 << 10,
                'M' => 1 << 20,
                'G' => 1 << 30,
                'T' => 1 << 40,
                'B' => 1,
                _ => return None,
            };
            (&t[..i], mult)
        }
        _ => (t, 1),
    };
    let n: f64 = num.trim().parse().ok()?;
    (n.is_finite() && n >= 0.0).then_some((n * mult as f64) as u64)
}

/// A bound: a size ([`parse_size`]) or, with `count`, a plain number; `unlimited` is
/// `u64::MAX`. Zero is no bound anyone means, so it is refused.
pub(crate) fn parse_bound(s: &str, count: bool) -> Option<u64> {
    if s.trim().eq_ignore_ascii_case("unlimited") {
        return Some(u64::MAX);
    }
    let n = if count {
        s.trim().parse().ok()?
    } else {
        parse_size(s)?
    };
    (n > 0).then_some(n)
}

/// `n` bytes for people: `512 MiB`, `1.5 GiB`, `unlimited`.
/// A duration as `--timeout` takes one: `90s`, `10m`, `1h30m`, `1.5s`.
pub(crate) fn show_duration(d: std::time::Duration) -> String {
    let secs = d.as_secs();
    if d.subsec_nanos() != 0 || secs == 0 {
        return format!("{}s", d.as_secs_f64());
    }
    let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    let mut out = String::new();
    for (n, unit) in [(h, "h"), (m, "m"), (s, "s")] {
        if n > 0 {
            out.push_str(&format!("{n}{unit}"));
        }
    }
    out
}

pub(crate) fn show_size(n: u64) -> String {
    if n == u64::MAX {
        return "unlimited".into();
    }
    let units = [
        (1u64 << 40, "TiB"),
        (1 << 30, "GiB"),
        (1 << 20, "MiB"),
        (1 << 10, "KiB"),
    ];
    for (size, name) in units {
        if n >= size {
            let v = n as f64 / size as f64;
            return if v.fract() == 0.0 {
                format!("{v:.0} {name}")
            } else {
                format!("{v:.1} {name}")
            };
        }
    }
    format!("{n} bytes")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_duration_is_shown_as_a_timeout_is_written() {
        use std::time::Duration;
        assert_eq!(show_duration(Duration::from_secs(90)), "1m30s");
        assert_eq!(show_duration(Duration::from_secs(3600)), "1h");
        assert_eq!(show_duration(Duration::from_secs(5)), "5s");
        assert_eq!(show_duration(Duration::from_millis(1500)), "1.5s");
    }

    #[test]
    fn sizes_and_bounds() {
        assert_eq!(parse_size("500M"), Some(500 << 20));
        assert_eq!(parse_size("2g"), Some(2 << 30));
        assert_eq!(parse_size("1.5G"), Some(3 << 29));
        assert_eq!(parse_size("1024"), Some(1024));
        assert_eq!(parse_size("lots"), None);
        assert_eq!(parse_size("5X"), None);
        assert_eq!(parse_size("-1M"), None);
        assert_eq!(parse_size("nanG"), None);
        assert_eq!(parse_bound("unlimited", false), Some(u64::MAX));
        assert_eq!(parse_bound("512M", false), Some(512 << 20));
        assert_eq!(parse_bound("0", false), None);
        assert_eq!(parse_bound("400", true), Some(400));
        assert_eq!(parse_bound("4k", true), None);
        assert_eq!(show_size(512 << 20), "512 MiB");
        assert_eq!(show_size(3 << 29), "1.5 GiB");
        assert_eq!(show_size(u64::MAX), "unlimited");
    }
}
