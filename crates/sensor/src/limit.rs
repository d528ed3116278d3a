//! The reset time in a provider's usage-limit notice, as Claude Code words
//! it in the message it writes in the model's place (`isApiErrorMessage`,
//! `error: "rate_limit"`, model `<synthetic>`):
//!
//! - `You've hit your session limit · resets 12:50am (America/Los_Angeles)`
//! - `You've hit your limit · resets 4:50am (Europe/Rome)`
//! - `You've hit your weekly limit · resets Sep 17 at 10pm (Europe/Lisbon)`
//! - `You're out of extra usage · resets 11:59pm (UTC)`
//! - `5-hour limit reached ∙ resets 3pm` (no zone: the machine's own)
//! - `Claude AI usage limit reached|1752000000` (before 1.0.x wording: the
//!   reset as seconds since the epoch)
//!
//! A clock time is the next one at or after the notice; a date without a
//! year the next such date. Anything else is no reset time (`None`): the
//! notice is then read as the limit it is, without a time to wait for.

use jiff::civil::{Date, Time};
use jiff::tz::TimeZone;
use jiff::{Timestamp, ToSpan};

/// Whether a message Claude Code wrote in the model's place is a usage
/// limit (not an outage or a transient 429 it retries itself).
pub fn is_usage_limit(error: Option<&str>, text: &str) -> bool {
    let t = text.to_ascii_lowercase();
    t.contains("usage limit reached")
        || t.contains("out of extra usage")
        || t.contains("hit your") && t.contains("limit")
        || t.contains("resets") && (t.contains("limit reached") || error == Some("rate_limit"))
}

/// When the limit in `text` resets (ms since the epoch), read against the
/// notice's own time `at_ms`; `local` is the zone of a time written
/// without one.
pub fn reset_ms(text: &str, at_ms: u64, local: &TimeZone) -> Option<u64> {
    if let Some((_, epoch)) = text.split_once("usage limit reached|") {
        let digits: String = epoch.chars().take_while(char::is_ascii_digit).collect();
        let secs: u64 = digits.parse().ok()?;
        return secs.checked_mul(1000);
    }
    let lower = text.to_ascii_lowercase();
    let start = lower.find("resets ")? + "resets ".len();
    // The rest of the line: `[Mon D[,| at] ]time[ (Zone)]`.
    let rest = text[start..].lines().next()?.trim();
    let (when, zone) = match rest.find('(') {
        Some(open) => {
            let close = rest[open..].find(')')? + open;
            (rest[..open].trim(), Some(rest[open + 1..close].trim()))
        }
        None => (rest.trim_end_matches('.').trim(), None),
    };
    let tz = match zone {
        Some(name) => TimeZone::get(name).ok()?,
        None => local.clone(),
    };
    let now = Timestamp::from_millisecond(i64::try_from(at_ms).ok()?).ok()?;
    let today = now.to_zoned(tz.clone());
    let (date, clock) = match when.rsplit_once(" at ").or_else(|| when.rsplit_once(", ")) {
        Some((d, c)) => (Some(month_day(d.trim(), today.year())?), c.trim()),
        None => (None, when),
    };
    let time = clock_time(clock)?;
    let reset = match date {
        Some(d) => {
            let at = d.to_datetime(time).to_zoned(tz.clone()).ok()?;
            // A date already a day behind the notice is next year's.
            if at.timestamp() < now - 24.hours() {
                d.checked_add(1.year())
                    .ok()?
                    .to_datetime(time)
                    .to_zoned(tz)
                    .ok()?
            } else {
                at
            }
        }
        None => {
            let at = today.date().to_datetime(time).to_zoned(tz.clone()).ok()?;
            if at.timestamp() < now {
                at.checked_add(1.day()).ok()?
            } else {
                at
            }
        }
    };
    u64::try_from(reset.timestamp().as_millisecond()).ok()
}

/// `Sep 17` (or `17 Sep`) in `year`.
fn month_day(text: &str, year: i16) -> Option<Date> {
    const MONTHS: [&str; 12] = [
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ];
    let mut parts = text.split_whitespace();
    let (a, b) = (parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let month_of = |w: &str| {
        let w = w.to_ascii_lowercase();
        MONTHS
            .iter()
            .position(|m| w.starts_with(m))
            .and_then(|i| i8::try_from(i + 1).ok())
    };
    let (month, day) = match (month_of(a), month_of(b)) {
        (Some(m), None) => (m, b.parse::<i8>().ok()?),
        (None, Some(m)) => (m, a.parse::<i8>().ok()?),
        _ => return None,
    };
    Date::new(year, month, day).ok()
}

/// `3pm`, `12:50am`, `10:05 PM` or `15:00`.
fn clock_time(text: &str) -> Option<Time> {
    let t = text.trim().to_ascii_lowercase();
    let (digits, half) = if let Some(d) = t.strip_suffix("am") {
        (d.trim(), Some(false))
    } else if let Some(d) = t.strip_suffix("pm") {
        (d.trim(), Some(true))
    } else {
        (t.as_str(), None)
    };
    let (h, m) = match digits.split_once(':') {
        Some((h, m)) => (h.parse::<i8>().ok()?, m.parse::<i8>().ok()?),
        None => (digits.parse::<i8>().ok()?, 0),
    };
    let hour = match half {
        Some(pm) => {
            if !(1..=12).contains(&h) {
                return None;
            }
            h % 12 + if pm { 12 } else { 0 }
        }
        None if digits.contains(':') => h,
        None => return None,
    };
    Time::new(hour, m, 0, 0).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(s: &str) -> u64 {
        crate::parse_time_ms(s).unwrap()
    }

    #[test]
    fn a_clock_time_is_the_next_one_in_its_zone() {
        let at = ms("2026-07-26T15:06:19.592Z");
        // 17:06 in Madrid (CEST, +2): 5:40pm is later the same day.
        let r = reset_ms(
            "You've hit your session limit · resets 5:40pm (Europe/Madrid)",
            at,
            &TimeZone::UTC,
        );
        assert_eq!(r, Some(ms("2026-07-26T15:40:00Z")));
        // 12:50am in Los Angeles is the next night.
        let r = reset_ms(
            "You've hit your session limit · resets 12:50am (America/Los_Angeles)",
            at,
            &TimeZone::UTC,
        );
        assert_eq!(r, Some(ms("2026-07-27T07:50:00Z")));
        // A second line after the notice is not part of it.
        let r = reset_ms(
            "You've hit your session limit · resets 1:20am (Europe/Vienna)\n/upgrade to increase your usage limit.",
            at,
            &TimeZone::UTC,
        );
        assert_eq!(r, Some(ms("2026-07-26T23:20:00Z")));
    }

    #[test]
    fn no_zone_is_the_machines_and_a_date_is_this_years_or_next() {
        let at = ms("2026-09-11T15:28:00Z");
        assert_eq!(
            reset_ms("5-hour limit reached ∙ resets 3pm", at, &TimeZone::UTC),
            Some(ms("2026-09-12T15:00:00Z")),
            "3pm has passed: tomorrow's"
        );
        let paris = TimeZone::get("Europe/Paris").unwrap();
        assert_eq!(
            reset_ms("You've hit your limit · resets 6:30pm", at, &paris),
            Some(ms("2026-09-11T16:30:00Z"))
        );
        assert_eq!(
            reset_ms(
                "You've hit your weekly limit · resets Sep 17 at 10pm (Europe/Lisbon)",
                at,
                &TimeZone::UTC
            ),
            Some(ms("2026-09-17T21:00:00Z"))
        );
        assert_eq!(
            reset_ms(
                "You've hit your weekly limit · resets Jan 2, 3am (UTC)",
                ms("2026-12-30T10:00:00Z"),
                &TimeZone::UTC
            ),
            Some(ms("2027-01-02T03:00:00Z")),
            "January after December is next year's"
        );
        assert_eq!(
            reset_ms(
                "You're out of extra usage · resets 11:59pm (UTC)",
                at,
                &TimeZone::UTC
            ),
            Some(ms("2026-09-11T23:59:00Z"))
        );
        assert_eq!(
            reset_ms(
                "Claude AI usage limit reached|1752000000",
                at,
                &TimeZone::UTC
            ),
            Some(1_752_000_000_000)
        );
    }

    #[test]
    fn what_is_not_a_reset_time_is_none() {
        let at = ms("2026-09-11T15:28:00Z");
        for text in [
            "You've hit your session limit",
            "You've hit your limit · resets soon",
            "You've hit your limit · resets 13pm (UTC)",
            "You've hit your limit · resets 3pm (Mars/Olympus)",
            "You've hit your limit · resets Foo 3, 3pm (UTC)",
            "You've hit your limit · resets 25:00 (UTC)",
            "You've hit your limit · resets 3pm (UTC",
            "Claude AI usage limit reached|soon",
            "API Error: Request rejected (429)",
            "resets é3pm",
        ] {
            assert_eq!(reset_ms(text, at, &TimeZone::UTC), None, "{text}");
        }
    }

    #[test]
    fn only_a_usage_limit_is_one() {
        assert!(is_usage_limit(
            Some("rate_limit"),
            "You've hit your session limit · resets 9:50pm (Asia/Saigon)"
        ));
        assert!(is_usage_limit(
            None,
            "Claude AI usage limit reached|1752000000"
        ));
        assert!(is_usage_limit(
            None,
            "You're out of extra usage · resets 11:59pm (UTC)"
        ));
        assert!(!is_usage_limit(
            Some("server_error"),
            "API Error: 529 Overloaded. This is a server-side issue, usually temporary"
        ));
        assert!(!is_usage_limit(
            Some("rate_limit"),
            "API Error: Request rejected (429) · Server is temporarily limiting requests (not your usage limit)"
        ));
        assert!(!is_usage_limit(
            Some("authentication_failed"),
            "Please run /login · API Error: 401"
        ));
    }
}
