//! Durations ("300us", "1.5ms", "20ms", "2s"), duration ranges ("300us..2ms") and CPU lists
//! ("all", "0,1", "0-3") as the two tools' options take them. Times are integer nanoseconds.

use crate::error::HostError;

/// A duration with its unit (ns, us or µs, ms, s) in ns; the number may have a fraction.
pub fn parse_duration_ns(s: &str) -> Result<i64, String> {
    let t = s.trim();
    let (num, scale) = if let Some(n) = t.strip_suffix("ns") {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix("us").or_else(|| t.strip_suffix("µs")) {
        (n, 1e3)
    } else if let Some(n) = t.strip_suffix("ms") {
        (n, 1e6)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1e9)
    } else {
        return Err(format!(
            "{s:?} has no unit (write e.g. 300us, 2ms, 1s; units ns, us, ms, s)"
        ));
    };
    match num.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok((v * scale).round() as i64),
        _ => Err(format!(
            "{s:?} is not a positive duration (e.g. 300us, 2ms)"
        )),
    }
}

/// "LO..HI" as two durations in ns, with 0 < LO <= HI.
pub fn parse_range_ns(s: &str) -> Result<(i64, i64), String> {
    let (a, b) = s
        .split_once("..")
        .ok_or_else(|| format!("{s:?} is not a range LO..HI (e.g. 300us..2ms)"))?;
    let lo = parse_duration_ns(a).map_err(|e| format!("range {s:?}: {e}"))?;
    let hi = parse_duration_ns(b).map_err(|e| format!("range {s:?}: {e}"))?;
    if lo > hi {
        return Err(format!("range {s:?}: its low end is above its high end"));
    }
    Ok((lo, hi))
}

/// A comma-separated list of durations in ns ("100us,1ms,5ms,20ms").
pub fn parse_duration_list_ns(s: &str) -> Result<Vec<i64>, String> {
    let v: Result<Vec<i64>, String> = s.split(',').map(parse_duration_ns).collect();
    let v = v?;
    if v.is_empty() {
        return Err("an empty list".into());
    }
    Ok(v)
}

/// Prints ns as ms or µs for messages ("300us", "2ms", "1.5ms").
pub fn fmt_ns(ns: i64) -> String {
    if ns % 1_000_000 == 0 {
        format!("{}ms", ns / 1_000_000)
    } else if ns >= 1_000_000 {
        format!("{}ms", ns as f64 / 1e6)
    } else {
        format!("{}us", ns as f64 / 1e3)
    }
}

/// The CPUs named by `spec` ("all", "0,1", "0-3,5"), each one of `allowed`, sorted, unique.
pub fn parse_cpus(spec: &str, allowed: &[usize]) -> Result<Vec<usize>, HostError> {
    let allowed_s = || {
        allowed
            .iter()
            .map(|c| c.to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    if spec == "all" {
        return Ok(allowed.to_vec());
    }
    let mut out = Vec::new();
    for part in spec.split(',') {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let (a, b) = match (a.trim().parse::<usize>(), b.trim().parse::<usize>()) {
            (Ok(a), Ok(b)) if a <= b => (a, b),
            _ => {
                return Err(HostError::bad(
                    "--cpus",
                    spec,
                    format!(
                        "not a CPU list (all, or e.g. 0,1 or 0-1; allowed: {})",
                        allowed_s()
                    ),
                ))
            }
        };
        for c in a..=b {
            if !allowed.contains(&c) {
                return Err(HostError::UnknownCpu {
                    cpu: c,
                    allowed: allowed_s(),
                });
            }
            out.push(c);
        }
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_their_unit() {
        assert_eq!(parse_duration_ns("300us"), Ok(300_000));
        assert_eq!(parse_duration_ns("300µs"), Ok(300_000));
        assert_eq!(parse_duration_ns("1.5ms"), Ok(1_500_000));
        assert_eq!(parse_duration_ns("2s"), Ok(2_000_000_000));
        assert_eq!(parse_duration_ns("250ns"), Ok(250));
        for bad in ["300", "-1ms", "0ms", "abcms", "nanms", ""] {
            assert!(parse_duration_ns(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn ranges_need_lo_at_most_hi() {
        assert_eq!(parse_range_ns("300us..2ms"), Ok((300_000, 2_000_000)));
        assert_eq!(parse_range_ns("5ms..5ms"), Ok((5_000_000, 5_000_000)));
        let e = parse_range_ns("2ms..300us").unwrap_err();
        assert!(e.contains("2ms..300us") && e.contains("above"), "{e}");
        assert!(parse_range_ns("2ms").is_err());
        assert!(parse_range_ns("0ms..2ms").is_err());
    }

    #[test]
    fn cpu_lists_are_checked_against_the_allowed_ones() {
        let allowed = [0, 1];
        assert_eq!(parse_cpus("all", &allowed).unwrap(), vec![0, 1]);
        assert_eq!(parse_cpus("1,0,1", &allowed).unwrap(), vec![0, 1]);
        assert_eq!(parse_cpus("0-1", &allowed).unwrap(), vec![0, 1]);
        let e = parse_cpus("0,7", &allowed).unwrap_err().to_string();
        assert!(e.contains("CPU 7") && e.contains("0,1"), "{e}");
        assert!(parse_cpus("x", &allowed).is_err());
    }

    #[test]
    fn durations_print_back() {
        assert_eq!(fmt_ns(300_000), "300us");
        assert_eq!(fmt_ns(2_000_000), "2ms");
        assert_eq!(fmt_ns(1_500_000), "1.5ms");
    }
}
