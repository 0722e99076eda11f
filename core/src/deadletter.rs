//! The `hopchain-dlq-*` headers a dead letter carries, read as the dead-letter index reads
//! them (`hopchain.schemas.deadletter.read_dead_letter_summary`): the last value of each name,
//! the required ones present, the vocabularies' words known.
//!
//! The headers hopchain writes are read here in full. A value in a form hopchain does not
//! write (a number with a sign or spaces, a time with another offset) is left to the Python
//! reader, whose parsers accept more; the failure's JSON is always its to validate.

use crate::read::Header;
use crate::rules::ERROR_TYPES;
use crate::text::is_timestamp;

const PREFIX: &[u8] = b"hopchain-dlq-";
/// The headers a summary reads.
const NAMES: [&str; 13] = [
    "hopchain-dlq-id",
    "hopchain-dlq-reason",
    "hopchain-dlq-error-type",
    "hopchain-dlq-owner",
    "hopchain-dlq-component",
    "hopchain-dlq-group",
    "hopchain-dlq-source-topic",
    "hopchain-dlq-source-partition",
    "hopchain-dlq-source-offset",
    "hopchain-dlq-source-timestamp",
    "hopchain-dlq-parked-at",
    "hopchain-dlq-failure",
    "hopchain-dlq-envelope",
];

/// What an index keeps of a dead letter.
#[derive(Clone, Debug, PartialEq)]
pub struct Summary<'a> {
    pub id: &'a str,
    pub owner: &'a str,
    pub source_topic: &'a str,
    pub error_type: &'a str,
    pub reason: Option<&'a str>,
    pub component: &'a str,
    pub source_timestamp_ms: i64,
    /// When it was parked, in Unix seconds.
    pub parked_at: f64,
    pub envelope: Option<&'a str>,
    /// The failure's JSON, for the caller to validate.
    pub failure: &'a str,
}

/// Why a dead letter's headers give no summary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unread {
    /// A `hopchain-dlq-*` header's value is not UTF-8.
    NotUtf8(String),
    /// A required header is missing.
    Missing(&'static str),
    /// A header's value is not of its form (a word outside its vocabulary, not a number).
    Invalid(&'static str),
    /// A value in a form hopchain does not write: the Python reader decides.
    Unusual(&'static str),
}

fn number(text: &str) -> Option<i64> {
    let digits = text.strip_prefix('-').unwrap_or(text);
    if digits.is_empty() || digits.len() > 18 || !digits.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// Days from 1970-01-01 to a date of the proleptic Gregorian calendar.
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let of_era = year - era * 400;
    let day_of_year = (153 * (month + if month > 2 { -3 } else { 9 }) + 2) / 5 + day - 1;
    let of_era_days = of_era * 365 + of_era / 4 - of_era / 100 + day_of_year;
    era * 146_097 + of_era_days - 719_468
}

/// Unix seconds of a UTC time as Python's `isoformat()` writes it (`+00:00`, microseconds
/// when not zero); None for any other form.
fn parked_at(text: &str) -> Option<f64> {
    let utc = text.strip_suffix("+00:00")?;
    // The same fields as a canonical timestamp: check them with its rules.
    if !is_timestamp(&format!("{utc}Z")) {
        return None;
    }
    let field =
        |range: std::ops::Range<usize>| utc.get(range).and_then(|part| part.parse::<i64>().ok());
    let (year, month, day) = (field(0..4)?, field(5..7)?, field(8..10)?);
    let (hour, minute, second) = (field(11..13)?, field(14..16)?, field(17..19)?);
    let micros = if utc.len() > 19 { field(20..26)? } else { 0 };
    let seconds = days_from_civil(year, month, day) * 86_400 + hour * 3_600 + minute * 60 + second;
    let total = seconds.checked_mul(1_000_000)?.checked_add(micros)?;
    // Exact as a double below 2^53 microseconds (until 2255): one rounding, as Python's.
    let exact: i64 = 1 << 53;
    if total.abs() >= exact {
        return None;
    }
    #[allow(clippy::cast_precision_loss)] // exact below 2^53, checked above
    let value = total as f64 / 1e6;
    Some(value)
}

/// Read a dead letter's `hopchain-dlq-*` headers.
pub fn read_summary<'a>(headers: &[Header<'a>], reasons: &[&str]) -> Result<Summary<'a>, Unread> {
    // Only the names read here are kept (the last value of each, as written last); every
    // `hopchain-dlq-*` value must be UTF-8 all the same.
    let mut found: Vec<(&'a [u8], &'a str)> = Vec::new();
    for header in headers {
        if !header.name.starts_with(PREFIX) {
            continue;
        }
        let value = std::str::from_utf8(header.value.unwrap_or_default())
            .map_err(|_| Unread::NotUtf8(String::from_utf8_lossy(header.name).into_owned()))?;
        if !NAMES.iter().any(|name| name.as_bytes() == header.name) {
            continue;
        }
        match found.iter_mut().find(|(name, _)| *name == header.name) {
            Some(slot) => slot.1 = value,
            None => found.push((header.name, value)),
        }
    }
    let get = |name: &str| {
        found
            .iter()
            .find(|(found, _)| *found == name.as_bytes())
            .map(|(_, value)| *value)
    };
    let required = |name: &'static str| get(name).ok_or(Unread::Missing(name));
    let reason = get("hopchain-dlq-reason").filter(|reason| !reason.is_empty());
    let error_type = required("hopchain-dlq-error-type")?;
    if reason.is_some_and(|reason| !reasons.contains(&reason)) {
        return Err(Unread::Invalid("hopchain-dlq-reason"));
    }
    if !ERROR_TYPES.contains(&error_type) {
        return Err(Unread::Invalid("hopchain-dlq-error-type"));
    }
    let component = required("hopchain-dlq-component")?;
    let source_topic = required("hopchain-dlq-source-topic")?;
    required("hopchain-dlq-group")?;
    for name in [
        "hopchain-dlq-source-partition",
        "hopchain-dlq-source-offset",
    ] {
        number(required(name)?).ok_or(Unread::Unusual(name))?;
    }
    let parked = parked_at(required("hopchain-dlq-parked-at")?)
        .ok_or(Unread::Unusual("hopchain-dlq-parked-at"))?;
    let failure = required("hopchain-dlq-failure")?;
    let id = required("hopchain-dlq-id")?;
    let owner = required("hopchain-dlq-owner")?;
    let timestamp = required("hopchain-dlq-source-timestamp")?;
    let source_timestamp_ms =
        number(timestamp).ok_or(Unread::Unusual("hopchain-dlq-source-timestamp"))?;
    Ok(Summary {
        id,
        owner,
        source_topic,
        error_type,
        reason,
        component,
        source_timestamp_ms,
        parked_at: parked,
        envelope: get("hopchain-dlq-envelope").filter(|envelope| !envelope.is_empty()),
        failure,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_and_times_as_python_counts_them() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        assert_eq!(
            parked_at("2026-03-01T09:30:00+00:00"),
            Some(1_772_357_400.0)
        );
        assert_eq!(
            parked_at("2026-03-01T09:30:00.250000+00:00"),
            Some(1_772_357_400.25)
        );
        assert_eq!(parked_at("2026-03-01T09:30:00+01:00"), None);
        assert_eq!(parked_at("2026-03-01T09:30:00"), None);
    }

    fn header<'a>(name: &'a str, value: &'a str) -> Header<'a> {
        Header {
            name: name.as_bytes(),
            value: Some(value.as_bytes()),
        }
    }

    #[test]
    fn reads_the_headers_hopchain_writes_and_names_what_is_missing() {
        let mut headers = vec![
            header("hopchain-dlq-id", "01JNE7Q4Z9M1V6X0C3R8T2Y5WC"),
            header("hopchain-dlq-error-type", "malformed"),
            header("hopchain-dlq-owner", "claims-team"),
            header("hopchain-dlq-component", "review"),
            header("hopchain-dlq-group", "review"),
            header("hopchain-dlq-source-topic", "claims"),
            header("hopchain-dlq-source-partition", "3"),
            header("hopchain-dlq-source-offset", "12"),
            header("hopchain-dlq-source-timestamp", "1772356200000"),
            header("hopchain-dlq-parked-at", "2026-03-01T10:00:00+00:00"),
            header("hopchain-dlq-failure", "{}"),
            header("hopchain-dlq-reason", "bad_digest"),
        ];
        let read = read_summary(&headers, &["bad_digest"]);
        assert_eq!(
            read.as_ref().map(|summary| summary.reason),
            Ok(Some("bad_digest"))
        );
        assert_eq!(read.map(|summary| summary.parked_at), Ok(1_772_359_200.0));
        headers.push(header("hopchain-dlq-error-type", "nope"));
        assert_eq!(
            read_summary(&headers, &["bad_digest"]),
            Err(Unread::Invalid("hopchain-dlq-error-type"))
        );
        headers.retain(|header| header.name != b"hopchain-dlq-error-type");
        assert_eq!(
            read_summary(&headers, &["bad_digest"]),
            Err(Unread::Missing("hopchain-dlq-error-type"))
        );
    }

    #[test]
    fn numbers_in_the_one_form_hopchain_writes() {
        assert_eq!(number("42"), Some(42));
        assert_eq!(number("-1"), Some(-1));
        assert_eq!(number("+1"), None);
        assert_eq!(number(" 1"), None);
        assert_eq!(number("1_000"), None);
    }
}
