//! Durations (`90m`, `7d`, `1h30m`) and points in time (RFC 3339, a date, or a duration ago).

use chrono::{DateTime, Duration, NaiveDate, NaiveDateTime, TimeZone, Utc};

/// Parses `90m`, `7d`, `1h30m`, `2w`, `45s`. Units: s, m, h, d, w.
pub(crate) fn parse_duration(s: &str) -> Result<Duration, String> {
    let text = s.trim();
    if text.is_empty() {
        return Err("empty duration".into());
    }
    let mut total = Duration::zero();
    let mut digits = String::new();
    for c in text.chars() {
        if c.is_ascii_digit() {
            digits.push(c);
            continue;
        }
        if digits.is_empty() {
            return Err(format!(
                "invalid duration `{s}`: expected a number before `{c}` (e.g. 90m, 7d, 1h30m)"
            ));
        }
        let n: i64 = digits
            .parse()
            .map_err(|_| format!("invalid duration `{s}`: number too large"))?;
        digits.clear();
        let unit = match c {
            's' => Duration::try_seconds(n),
            'm' => Duration::try_minutes(n),
            'h' => Duration::try_hours(n),
            'd' => Duration::try_days(n),
            'w' => Duration::try_weeks(n),
            _ => {
                return Err(format!(
                    "invalid duration `{s}`: unknown unit `{c}` (use s, m, h, d or w)"
                ));
            }
        };
        let unit = unit.ok_or_else(|| format!("invalid duration `{s}`: too large"))?;
        total = total
            .checked_add(&unit)
            .ok_or_else(|| format!("invalid duration `{s}`: too large"))?;
    }
    if !digits.is_empty() {
        return Err(format!(
            "invalid duration `{s}`: missing unit after `{digits}` (use s, m, h, d or w, e.g. {digits}m)"
        ));
    }
    Ok(total)
}

/// `7d`, `1h30m`, or a typo of one (`7y`): digits and letters only, starting with a digit.
fn looks_like_duration(t: &str) -> bool {
    t.starts_with(|c: char| c.is_ascii_digit())
        && t.ends_with(|c: char| c.is_ascii_alphabetic())
        && t.chars().all(|c| c.is_ascii_alphanumeric())
}

/// Parses a point in time: RFC 3339, `YYYY-MM-DD`, `YYYY-MM-DD HH:MM[:SS]` (UTC),
/// `now`, or a duration meaning that long ago (`2h`, `7d`).
pub(crate) fn parse_when(s: &str, now: DateTime<Utc>) -> Result<DateTime<Utc>, String> {
    let t = s.trim();
    if t.eq_ignore_ascii_case("now") {
        return Ok(now);
    }
    if let Ok(dt) = DateTime::parse_from_rfc3339(t) {
        return Ok(dt.with_timezone(&Utc));
    }
    for fmt in [
        "%Y-%m-%d %H:%M:%S",
        "%Y-%m-%dT%H:%M:%S",
        "%Y-%m-%d %H:%M",
        "%Y-%m-%dT%H:%M",
    ] {
        if let Ok(n) = NaiveDateTime::parse_from_str(t, fmt) {
            return Ok(Utc.from_utc_datetime(&n));
        }
    }
    if let Ok(d) = NaiveDate::parse_from_str(t, "%Y-%m-%d") {
        return Ok(Utc.from_utc_datetime(&d.and_hms_opt(0, 0, 0).expect("midnight")));
    }
    if looks_like_duration(t) {
        let d = parse_duration(t)?;
        return now
            .checked_sub_signed(d)
            .ok_or_else(|| format!("invalid time `{s}`: too far in the past"));
    }
    Err(format!(
        "invalid time `{s}`: expected RFC 3339 (2026-11-30T12:00:00Z), a date (2026-11-30) or a duration ago (2h, 7d)"
    ))
}

/// `--older-than`: a duration (cutoff = now - duration) or an RFC 3339 timestamp / date.
pub(crate) fn parse_cutoff(s: &str, now: DateTime<Utc>) -> Result<DateTime<Utc>, String> {
    let t = s.trim();
    if looks_like_duration(t) {
        let d = parse_duration(t)?;
        return now
            .checked_sub_signed(d)
            .ok_or_else(|| format!("invalid duration `{s}`: too large"));
    }
    parse_when(t, now).map_err(|_| {
        format!("invalid --older-than `{s}`: expected a duration (90m, 7d) or RFC 3339 timestamp")
    })
}

/// Parses a timestamp as databases store it in text: RFC 3339, `YYYY-MM-DD HH:MM:SS[.f]`
/// with or without an offset, or a bare date. Naive values are UTC.
pub(crate) fn parse_stored_time(s: &str) -> Option<DateTime<Utc>> {
    let t = s.trim();
    if let Ok(dt) = DateTime::parse_from_rfc3339(t) {
        return Some(dt.with_timezone(&Utc));
    }
    for fmt in [
        "%Y-%m-%d %H:%M:%S%.f%:z",
        "%Y-%m-%d %H:%M:%S%.f%#z",
        "%Y-%m-%dT%H:%M:%S%.f%#z",
    ] {
        if let Ok(dt) = DateTime::parse_from_str(t, fmt) {
            return Some(dt.with_timezone(&Utc));
        }
    }
    let naive = t.trim_end_matches('Z');
    for fmt in [
        "%Y-%m-%d %H:%M:%S%.f",
        "%Y-%m-%dT%H:%M:%S%.f",
        "%Y-%m-%d %H:%M",
    ] {
        if let Ok(n) = NaiveDateTime::parse_from_str(naive, fmt) {
            return Some(Utc.from_utc_datetime(&n));
        }
    }
    NaiveDate::parse_from_str(t, "%Y-%m-%d")
        .ok()
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .map(|n| Utc.from_utc_datetime(&n))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> DateTime<Utc> {
        "2026-11-30T12:00:00Z".parse().unwrap()
    }

    #[test]
    fn stored_times() {
        let want: DateTime<Utc> = "2026-11-30T12:00:00.5Z".parse().unwrap();
        for s in [
            "2026-11-30T12:00:00.5Z",
            "2026-11-30 12:00:00.5",
            "2026-11-30 12:00:00.500000+00:00",
            "2026-11-30T12:00:00.5",
            "2026-11-30 14:00:00.5+02:00",
        ] {
            assert_eq!(parse_stored_time(s), Some(want), "{s}");
        }
        assert!(parse_stored_time("2026-11-30").is_some());
        assert!(parse_stored_time("garbage").is_none());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("90m").unwrap(), Duration::minutes(90));
        assert_eq!(parse_duration("7d").unwrap(), Duration::days(7));
        assert_eq!(parse_duration("1h30m").unwrap(), Duration::minutes(90));
        assert!(parse_duration("7").unwrap_err().contains("missing unit"));
        assert!(parse_duration("7y").unwrap_err().contains("unknown unit"));
        assert!(parse_duration("").is_err());
        assert!(parse_duration("d").is_err());
        assert!(parse_duration("99999999999999999999d").is_err());
    }

    #[test]
    fn points_in_time() {
        assert_eq!(
            parse_when("2h", now()).unwrap(),
            "2026-11-30T10:00:00Z".parse::<DateTime<Utc>>().unwrap()
        );
        assert_eq!(
            parse_when("2026-11-01", now()).unwrap(),
            "2026-11-01T00:00:00Z".parse::<DateTime<Utc>>().unwrap()
        );
        assert_eq!(
            parse_when("2026-11-01T10:00:00+02:00", now()).unwrap(),
            "2026-11-01T08:00:00Z".parse::<DateTime<Utc>>().unwrap()
        );
        assert!(parse_when("yesterdayish", now()).is_err());
        assert!(parse_when("2026-13-01", now()).is_err());
        assert_eq!(
            parse_cutoff("30d", now()).unwrap(),
            "2026-10-31T12:00:00Z".parse::<DateTime<Utc>>().unwrap()
        );
        assert!(parse_cutoff("soon", now()).is_err());
        assert!(
            parse_cutoff("7y", now())
                .unwrap_err()
                .contains("unknown unit")
        );
        assert_eq!(
            parse_cutoff("2026-11-01T00:00:00Z", now()).unwrap(),
            "2026-11-01T00:00:00Z".parse::<DateTime<Utc>>().unwrap()
        );
    }
}
