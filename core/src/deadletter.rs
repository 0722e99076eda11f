//! The `hopchain-dlq-*` headers a dead letter carries, read as the dead-letter index reads
//! them (`hopchain.schemas.deadletter.read_dead_letter_summary`): the last value of each name,
//! the required ones present, the vocabularies' words known.
//!
//! The headers hopchain writes are read here in full. A value in a form hopchain does not
//! write (a number with a sign or spaces, a time with another offset) is left to the Python
//! reader, whose parsers accept more; the failure's JSON is always its to validate.

use std::borrow::Cow;

use crate::json::{self, Member, Node, Value};
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

const ENVELOPE: &str = "hopchain-dlq-envelope";
const TRUNCATED: &[u8] = b"hopchain-dlq-truncated";
const REDRIVE_COUNT: &[u8] = b"hopchain-redrive-count";
/// The headers an identity is read from leniently when there is no parking envelope.
const LENIENT_SOURCES: [&[u8]; 2] = [b"hopchain-envelope", b"traceparent"];
/// The longest id, trace id or intent key an index keeps (in characters).
const MAX_IDENTIFIER: usize = 200;

/// What an index keeps of the parking envelope, read without validating it (as
/// `hopchain.consumers.records` reads it with `json.loads`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity<'a> {
    pub id: Option<Cow<'a, str>>,
    pub trace_id: Option<Cow<'a, str>>,
    pub intent_key: Option<Cow<'a, str>>,
    /// Hops of the chain whose decision is `redriven`.
    pub redriven: usize,
}

/// A summary with the rest of what an index entry reads of a letter's headers.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry<'a> {
    pub summary: Summary<'a>,
    /// None when the letter has no parking envelope but an envelope or a `traceparent` to
    /// read its identity from leniently (the Python reader does).
    pub identity: Option<Identity<'a>>,
    /// The `hopchain-redrive-count` header's count (0 without one).
    pub redrive_count: i64,
}

/// An id as an index keeps it: one line of printable text of at most 200 characters, else
/// none. `Err` for a text whose printability needs Unicode's tables (left to Python's
/// `str.isprintable`).
fn identifier(text: &str) -> Result<Option<&str>, ()> {
    if text.is_ascii() {
        let printable = text.bytes().all(|byte| (b' '..=b'~').contains(&byte));
        let kept = !text.is_empty() && text.len() <= MAX_IDENTIFIER && printable;
        return Ok(kept.then_some(text));
    }
    if text.chars().count() > MAX_IDENTIFIER {
        return Ok(None);
    }
    Err(())
}

/// The value of an object's member, the last one of that name (as `json.loads` keeps it).
fn member<'t, 'a>(members: &'t [Member<'a>], name: &str) -> Option<&'t Value<'a>> {
    members
        .iter()
        .rev()
        .find(|member| member.name == name)
        .map(|member| &member.node.value)
}

fn identity_member<'a>(members: &[Member<'a>], name: &str) -> Result<Option<Cow<'a, str>>, Unread> {
    let Some(Value::Str(text)) = member(members, name) else {
        return Ok(None);
    };
    let kept = identifier(text).map_err(|()| Unread::Unusual(ENVELOPE))?;
    Ok(kept.map(|_| text.clone()))
}

fn redriven(hop: &Node<'_>) -> bool {
    let Value::Object(members) = &hop.value else {
        return false;
    };
    matches!(member(members, "decision"), Some(Value::Str(decision)) if decision == "redriven")
}

/// The identity and redriven hops of a parking envelope's JSON: an object holding a chain.
/// Any other text (not JSON, not such an object, a lone surrogate, an id of non-ASCII
/// text) is left to the Python reader.
pub fn read_parking_identity(text: &str) -> Result<Identity<'_>, Unread> {
    let unusual = Unread::Unusual(ENVELOPE);
    let parsed = json::parse(text.as_bytes()).map_err(|_| unusual.clone())?;
    if parsed.lone_surrogate {
        return Err(unusual);
    }
    let Value::Object(members) = parsed.root.value else {
        return Err(unusual);
    };
    let Some(Value::Array(chain)) = member(&members, "chain") else {
        return Err(unusual);
    };
    Ok(Identity {
        redriven: chain.iter().filter(|hop| redriven(hop)).count(),
        id: identity_member(&members, "id")?,
        trace_id: identity_member(&members, "trace_id")?,
        intent_key: identity_member(&members, "intent_key")?,
    })
}

/// The `hopchain-redrive-count` header's count as the Python reader counts it (digits, else
/// 0); a value it would strip or read as other digits first is left to it.
fn redrive_count(headers: &[Header<'_>]) -> Result<i64, Unread> {
    let last = headers
        .iter()
        .rev()
        .find(|header| header.name == REDRIVE_COUNT);
    let Some(text) = last.and_then(|header| std::str::from_utf8(header.value?).ok()) else {
        return Ok(0);
    };
    if let Some(count) = number(text).filter(|_| !text.starts_with('-')) {
        return Ok(count);
    }
    // Python strips white space (and 0x1c to 0x1f) and knows other digits: its to read.
    if !text.is_ascii() || text.bytes().any(|byte| byte <= b' ') || text.len() > 18 {
        return Err(Unread::Unusual("hopchain-redrive-count"));
    }
    Ok(0)
}

/// The identity of a letter without a parking envelope that has nothing else to give one:
/// no `hopchain-envelope` or `traceparent` header, and no value that is an envelope naming
/// an intent key (as the lenient reader looks for one). None when there is one to read.
fn no_identity(headers: &[Header<'_>], value: Option<&[u8]>) -> Option<Identity<'static>> {
    let beside = headers
        .iter()
        .any(|header| LENIENT_SOURCES.contains(&header.name));
    let body = value.is_some_and(|value| {
        value.starts_with(b"{") && memchr::memmem::find(value, b"\"intent_key\"").is_some()
    });
    (!beside && !body).then_some(Identity {
        id: None,
        trace_id: None,
        intent_key: None,
        redriven: 0,
    })
}

/// Read what an index entry needs of a dead letter's headers (and its value, for a letter
/// without a parking envelope). A letter with a reference (`hopchain-dlq-truncated`) is left
/// to the Python reader.
pub fn read_entry<'a>(
    headers: &[Header<'a>],
    value: Option<&[u8]>,
    reasons: &[&str],
) -> Result<Entry<'a>, Unread> {
    let summary = read_summary(headers, reasons)?;
    if headers.iter().any(|header| header.name == TRUNCATED) {
        return Err(Unread::Unusual("hopchain-dlq-truncated"));
    }
    let identity = match summary.envelope {
        Some(text) => Some(read_parking_identity(text)?),
        None => no_identity(headers, value),
    };
    Ok(Entry {
        redrive_count: redrive_count(headers)?,
        identity,
        summary,
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

    #[test]
    fn a_parking_envelope_gives_its_identity_and_redriven_hops() {
        let text = r#"{"id":"e-1","trace_id":"0af7651916cd43dd8448eb211c80319c","intent_key":"k",
            "chain":[{"decision":"redriven"},{"decision":"accepted"},7,{"decision":"redriven"}]}"#;
        let identity = read_parking_identity(text);
        assert_eq!(identity.as_ref().map(|read| read.redriven), Ok(2));
        assert_eq!(
            identity.map(|read| (read.id, read.intent_key)),
            Ok((Some(Cow::Borrowed("e-1")), Some(Cow::Borrowed("k"))))
        );
    }

    #[test]
    fn a_parking_envelope_keeps_the_last_of_a_name_and_drops_what_is_not_an_id() {
        let long = "x".repeat(201);
        let text = format!(
            r#"{{"id":"first","id":"a\tb","trace_id":7,"intent_key":"{long}","chain":[]}}"#
        );
        assert_eq!(
            read_parking_identity(&text),
            Ok(Identity {
                id: None,
                trace_id: None,
                intent_key: None,
                redriven: 0
            })
        );
        // Escapes are decoded before the comparisons, as json.loads decodes them.
        let escaped = r#"{"id":"\u0065-1","chain":[{"decision":"red\u0072iven"}]}"#;
        assert_eq!(
            read_parking_identity(escaped).map(|read| (read.id, read.redriven)),
            Ok((Some(Cow::Owned("e-1".to_owned())), 1))
        );
    }

    #[test]
    fn a_parking_envelope_it_cannot_vouch_for_is_left_to_python() {
        let unusual = Err(Unread::Unusual(ENVELOPE));
        for text in [
            "",
            "[]",
            r#"{"id":"e"}"#,
            r#"{"chain":{}}"#,
            r#"{"chain":[],"#,
            r#"{"chain":[],"id":"\ud800"}"#,
            r#"{"chain":[],"id":"café"}"#,
            r#"{"chain":[NaN]}"#,
        ] {
            assert_eq!(read_parking_identity(text), unusual, "{text}");
        }
    }

    #[test]
    fn an_entry_counts_redrives_and_leaves_references_to_python() {
        let mut headers = vec![
            header("hopchain-dlq-id", "01JNE7Q4Z9M1V6X0C3R8T2Y5WC"),
            header("hopchain-dlq-error-type", "internal"),
            header("hopchain-dlq-owner", "claims-team"),
            header("hopchain-dlq-component", "review"),
            header("hopchain-dlq-group", "review"),
            header("hopchain-dlq-source-topic", "claims"),
            header("hopchain-dlq-source-partition", "3"),
            header("hopchain-dlq-source-offset", "12"),
            header("hopchain-dlq-source-timestamp", "1772356200000"),
            header("hopchain-dlq-parked-at", "2026-03-01T10:00:00+00:00"),
            header("hopchain-dlq-failure", "{}"),
        ];
        let nothing = Identity {
            id: None,
            trace_id: None,
            intent_key: None,
            redriven: 0,
        };
        let entry = read_entry(&headers, Some(b"{}"), &[]);
        assert_eq!(
            entry.map(|entry| (entry.identity, entry.redrive_count)),
            Ok((Some(nothing), 0))
        );
        // An envelope to read leniently: the Python reader reads it.
        let body = br#"{"id":"e","intent_key":"k"}"#;
        let entry = read_entry(&headers, Some(body), &[]);
        assert_eq!(entry.map(|entry| entry.identity), Ok(None));
        headers.push(header(
            "traceparent",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        ));
        let entry = read_entry(&headers, Some(b"{}"), &[]);
        assert_eq!(entry.map(|entry| entry.identity), Ok(None));
        headers.push(header(
            "hopchain-dlq-envelope",
            r#"{"chain":[{"decision":"redriven"}]}"#,
        ));
        headers.push(header("hopchain-redrive-count", "5"));
        let entry = read_entry(&headers, None, &[]);
        assert_eq!(
            entry.map(|entry| (
                entry.identity.map(|identity| identity.redriven),
                entry.redrive_count
            )),
            Ok((Some(1), 5))
        );
        for (count, read) in [("x", Ok(0)), ("-2", Ok(0)), ("", Ok(0)), (" 5", Err(()))] {
            headers.push(header("hopchain-redrive-count", count));
            let entry = read_entry(&headers, None, &[]).map(|entry| entry.redrive_count);
            assert_eq!(entry.map_err(|_| ()), read, "{count:?}");
        }
        headers.push(header("hopchain-dlq-truncated", "1"));
        assert_eq!(
            read_entry(&headers, None, &[]).map(|entry| entry.redrive_count),
            Err(Unread::Unusual("hopchain-dlq-truncated"))
        );
    }
}
