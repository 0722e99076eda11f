//! Reading a record (SPEC.md section 5): its value and headers, the envelope they carry, and
//! the checks that tie the envelope to the topic, the payload and the trace.
//!
//! Step 10 (the payload against the topic's contract) is the caller's: a reader returns the
//! payload's byte range, and a refusal of steps 11 to 14 says it comes after that step, so
//! that a payload the contract refuses is refused for that first.

use std::ops::Range;

use crate::digest::payload_digest;
use crate::envelope::{read_envelope_str, Envelope};
use crate::json::uses_non_finite;
use crate::layout::is_v2;
use crate::reason::{Reason, Refusal};
use crate::sign::Keyring;
use crate::traceparent;

pub const ENVELOPE_HEADER: &str = "hopchain-envelope";
pub const DEGRADED_HEADER: &str = "hopchain-degraded";
pub const TRACEPARENT_HEADER: &str = "traceparent";
pub const TRACESTATE_HEADER: &str = "tracestate";
/// Headers that must appear once (`traceparent` may repeat: instrumentations add theirs).
const SINGLE_HEADERS: [&str; 2] = [ENVELOPE_HEADER, DEGRADED_HEADER];
/// In body mode, what follows the signatures: the payload member, then `}`.
pub const PAYLOAD_MEMBER: &[u8] = b",\"payload\":";

/// Where a topic's envelope travels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// The value is the payload; the envelope is the `hopchain-envelope` header.
    Headers,
    /// The value is the envelope with the payload as its last member.
    Body,
}

/// What a reader knows of the topic it reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Topic {
    pub topic: String,
    pub mode: Mode,
    pub contract: String,
    pub contract_version: i64,
    /// The components allowed to write its records (any, when empty).
    pub writers: Vec<String>,
    /// Headers mode: the value is bytes in a binary payload format (Confluent's
    /// schema-registry framing), not JSON text: it is neither checked to be UTF-8 nor
    /// searched for `NaN` and `Infinity`. Its digest covers the bytes as they are.
    pub binary_payload: bool,
}

/// Bounds a record must stay within.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub max_hops: usize,
    pub max_record_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_hops: 64,
            max_record_bytes: 1_000_000,
        }
    }
}

/// One header as the client read it: the name's bytes, the value's (None for a null value).
#[derive(Clone, Copy, Debug)]
pub struct Header<'a> {
    pub name: &'a [u8],
    pub value: Option<&'a [u8]>,
}

/// A consumed record: its value (None for a tombstone) and headers, in order.
#[derive(Clone, Copy, Debug)]
pub struct Record<'a> {
    pub value: Option<&'a [u8]>,
    pub headers: &'a [Header<'a>],
}

/// Where a record's envelope text is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    Value,
    EnvelopeHeader,
}

/// A record whose envelope passed every check of the reader.
#[derive(Clone, Debug)]
pub struct Accepted {
    pub envelope: Envelope,
    /// Where the envelope text is: the value (body mode) or the envelope header.
    pub source: Source,
    /// The payload's bytes in the value.
    pub payload: Range<usize>,
    pub payload_digest: String,
    /// The `traceparent` that names the envelope's trace and the last hop's span.
    pub traceparent: String,
    pub tracestate: Option<String>,
}

/// A reader's verdict on one record.
#[derive(Clone, Debug)]
pub enum Outcome {
    /// Every check passed; the payload's contract (step 10) is the caller's to apply.
    Accepted(Box<Accepted>),
    /// Refused at one of steps 1 to 9: the payload's contract is not applied.
    Refused(Refusal),
    /// Refused at one of steps 11 to 14; the payload's contract comes first.
    RefusedAfterPayload {
        refusal: Refusal,
        payload: Range<usize>,
    },
    /// Not schema 2 (a schema-1 envelope): schema 1's reader decides (SPEC.md section 6),
    /// which is not in this crate.
    Schema1,
}

fn text(bytes: &[u8]) -> Option<&str> {
    std::str::from_utf8(bytes).ok()
}

/// The headers' first values (a null value as empty), checked as step 1 checks them.
struct Headers<'a> {
    envelope: Option<&'a str>,
    degraded: Option<&'a str>,
    tracestate: Option<&'a str>,
    traceparents: Vec<&'a str>,
    size: usize,
}

fn read_headers<'a>(headers: &'a [Header<'a>]) -> Result<Headers<'a>, Refusal> {
    let mut read = Headers {
        envelope: None,
        degraded: None,
        tracestate: None,
        traceparents: Vec::new(),
        size: 0,
    };
    // Only the names read here are remembered: a record of many headers costs one pass.
    for header in headers {
        let single = SINGLE_HEADERS
            .iter()
            .any(|name| name.as_bytes() == header.name);
        let seen = match header.name {
            name if name == ENVELOPE_HEADER.as_bytes() => read.envelope.is_some(),
            name if name == DEGRADED_HEADER.as_bytes() => read.degraded.is_some(),
            _ => false,
        };
        if single && seen {
            let name = String::from_utf8_lossy(header.name);
            return Err(Refusal::new(
                Reason::DuplicateHeader,
                format!("$.headers.{name}"),
                format!("header {name:?} appears more than once"),
            ));
        }
        let raw = header.value.unwrap_or_default();
        let Some(value) = text(raw) else {
            let name = String::from_utf8_lossy(header.name);
            return Err(Refusal::new(
                Reason::NotUtf8,
                format!("$.headers.{name}"),
                format!("header {name:?} is not UTF-8; header values are text"),
            ));
        };
        let Some(name) = text(header.name) else {
            return Err(Refusal::new(
                Reason::NotUtf8,
                "$.headers",
                "a header name is not UTF-8",
            ));
        };
        read.size += raw.len() + header.name.len();
        match name {
            ENVELOPE_HEADER => read.envelope = Some(value),
            DEGRADED_HEADER => read.degraded = Some(value),
            TRACESTATE_HEADER if read.tracestate.is_none() => read.tracestate = Some(value),
            TRACEPARENT_HEADER if header.value.is_some() => read.traceparents.push(value),
            _ => {}
        }
    }
    Ok(read)
}

/// The major and minor version a schema-1 text names, found as the reference reader finds it.
fn named_version(text: &[u8]) -> Option<(u32, u32)> {
    const NAME: &[u8] = b"\"schema_version\"";
    let space = |text: &[u8], mut at: usize| {
        while matches!(
            text.get(at),
            Some(b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c)
        ) {
            at += 1;
        }
        at
    };
    let digits = |text: &[u8], at: usize| {
        let count = text
            .get(at..)
            .unwrap_or_default()
            .iter()
            .take_while(|byte| byte.is_ascii_digit())
            .count();
        let value = text
            .get(at..at + count)
            .and_then(|digits| std::str::from_utf8(digits).ok())
            .and_then(|digits| digits.parse::<u32>().ok());
        ((1..=4).contains(&count))
            .then_some(())
            .and(value)
            .map(|value| (value, at + count))
    };
    for found in memchr::memmem::find_iter(text, NAME) {
        let at = space(text, found + NAME.len());
        if text.get(at) != Some(&b':') {
            continue;
        }
        let at = space(text, at + 1);
        if text.get(at) != Some(&b'"') {
            continue;
        }
        let Some((major, at)) = digits(text, at + 1) else {
            continue;
        };
        if text.get(at) != Some(&b'.') {
            continue;
        }
        let Some((minor, at)) = digits(text, at + 1) else {
            continue;
        };
        if text.get(at) == Some(&b'"') {
            return Some((major, minor));
        }
    }
    None
}

/// A text without schema 2's layout: refused if it names a schema other than 1, else schema
/// 1's reader decides.
fn not_v2(text: &[u8]) -> Outcome {
    match named_version(text) {
        Some((2, minor)) => Outcome::Refused(Refusal::new(
            Reason::NotCanonical,
            "$",
            format!(
                "envelope schema 2.{minor} is written in its own layout (see SPEC.md): \
                 identity, then one hop a line, then signatures"
            ),
        )),
        Some((major, minor)) if major > 2 => Outcome::Refused(Refusal::new(
            Reason::NewerMajorVersion,
            "$.schema_version",
            format!("envelope schema {major}.{minor} is newer than this reader's 2.x"),
        )),
        Some((0, minor)) => Outcome::Refused(Refusal::new(
            Reason::InvalidValue,
            "$.schema_version",
            format!("envelope schema 0.{minor} is not readable"),
        )),
        _ => Outcome::Schema1,
    }
}

fn non_finite(path: &str) -> Outcome {
    Outcome::Refused(Refusal::new(
        Reason::BadJson,
        path,
        "NaN or Infinity is not JSON; send null or a finite number",
    ))
}

/// Read one record of `topic`.
pub fn read_record(
    record: &Record<'_>,
    topic: &Topic,
    keyring: Option<&Keyring>,
    limits: &Limits,
) -> Outcome {
    let Some(value) = record.value else {
        return Outcome::Refused(Refusal::new(
            Reason::Tombstone,
            "$",
            "the record value is null (a tombstone)",
        ));
    };
    if value.is_empty() {
        return Outcome::Refused(Refusal::new(
            Reason::EmptyValue,
            "$",
            "the record value is empty",
        ));
    }
    let headers = match read_headers(record.headers) {
        Ok(headers) => headers,
        Err(refusal) => return Outcome::Refused(refusal),
    };
    let size = headers.size + value.len();
    if size > limits.max_record_bytes {
        return Outcome::Refused(Refusal::new(
            Reason::Oversize,
            "$",
            format!(
                "record is {size} bytes; the limit is {}",
                limits.max_record_bytes
            ),
        ));
    }
    let binary = topic.binary_payload && topic.mode == Mode::Headers;
    let value_text = if binary { None } else { text(value) };
    if !binary && value_text.is_none() {
        return Outcome::Refused(Refusal::new(Reason::NotUtf8, "$", "the value is not UTF-8"));
    }
    // The envelope's text was checked to be UTF-8 above (a value) or by `read_headers` (a
    // header): the envelope's reader is given it as text, not to check it again.
    let (envelope_text, source) = match (topic.mode, value_text) {
        (Mode::Body, Some(value_text)) if is_v2(value) => (value_text, Source::Value),
        (Mode::Body, _) => {
            if uses_non_finite(value) {
                return non_finite("$");
            }
            return not_v2(value);
        }
        (Mode::Headers, _) => {
            if !binary && uses_non_finite(value) {
                return non_finite("$.payload");
            }
            let Some(envelope) = headers.envelope else {
                return Outcome::Refused(Refusal::new(
                    Reason::MissingHeader,
                    format!("$.headers.{ENVELOPE_HEADER}"),
                    format!(
                        "no {ENVELOPE_HEADER} header; was this record sent by a producer that \
                         does not use hopchain?"
                    ),
                ));
            };
            if !is_v2(envelope.as_bytes()) {
                if uses_non_finite(envelope.as_bytes()) {
                    return non_finite(&format!("$.headers.{ENVELOPE_HEADER}"));
                }
                return not_v2(envelope.as_bytes());
            }
            (envelope, Source::EnvelopeHeader)
        }
    };
    let envelope = match read_envelope_str(envelope_text, keyring) {
        Ok(envelope) => envelope,
        Err(refusal) => return Outcome::Refused(refusal),
    };
    // Step 9: what follows the signatures.
    let rest = envelope_text
        .as_bytes()
        .get(envelope.rest.clone())
        .unwrap_or_default();
    let payload = match source {
        Source::EnvelopeHeader if rest == b"}" => 0..value.len(),
        Source::EnvelopeHeader => {
            return Outcome::Refused(Refusal::new(
                Reason::NotCanonical,
                "$.signatures",
                "nothing may follow the signatures",
            ))
        }
        Source::Value if rest.starts_with(PAYLOAD_MEMBER) && rest.ends_with(b"}") => {
            envelope.rest.start + PAYLOAD_MEMBER.len()..value.len() - 1
        }
        Source::Value => {
            return Outcome::Refused(Refusal::new(
                Reason::NotCanonical,
                "$.payload",
                "in body mode the payload is the last member, after the signatures",
            ))
        }
    };
    let payload_bytes = value.get(payload.clone()).unwrap_or_default();
    if source == Source::Value && uses_non_finite(payload_bytes) {
        return non_finite("$.payload");
    }
    let digest = payload_digest(payload_bytes);
    let digest = String::from_utf8_lossy(&digest).into_owned();
    match after_payload(&envelope, topic, limits, &headers, &digest) {
        Ok(traceparent) => Outcome::Accepted(Box::new(Accepted {
            traceparent: traceparent.to_owned(),
            tracestate: headers.tracestate.map(str::to_owned),
            envelope,
            source,
            payload,
            payload_digest: digest,
        })),
        Err(refusal) => Outcome::RefusedAfterPayload { refusal, payload },
    }
}

/// Steps 11 to 14: the last hop against the topic and the payload, the chain's length, the
/// trace context and the degradation header. Returns the `traceparent` that counts.
fn after_payload<'a>(
    envelope: &Envelope,
    topic: &Topic,
    limits: &Limits,
    headers: &Headers<'a>,
    digest: &str,
) -> Result<&'a str, Refusal> {
    let index = envelope.hops.len().saturating_sub(1);
    let Some(last) = envelope.last() else {
        return Err(Refusal::new(
            Reason::InvalidValue,
            "$.chain",
            "a chain has at least one hop",
        ));
    };
    if last.destination != topic.topic {
        return Err(Refusal::new(
            Reason::TruncatedChain,
            format!("$.chain[{index}].destination"),
            format!(
                "the last hop wrote to {:?}, not to {:?}: hops were cut off the end of the \
                 chain, or the record was copied from another topic",
                last.destination, topic.topic
            ),
        ));
    }
    if !topic.writers.is_empty() && !topic.writers.iter().any(|writer| last.component == *writer) {
        return Err(Refusal::new(
            Reason::UnexpectedWriter,
            format!("$.chain[{index}].component"),
            format!(
                "the last hop was written by {:?}; topic {:?} is written by {} only",
                last.component,
                topic.topic,
                topic.writers.join(", ")
            ),
        ));
    }
    if last.contract != topic.contract || last.contract_version != topic.contract_version {
        return Err(Refusal::new(
            Reason::ContractMismatch,
            format!("$.chain[{index}].contract"),
            format!(
                "the last hop names contract {:?} v{}; topic {:?} carries {:?} v{}",
                last.contract,
                last.contract_version,
                topic.topic,
                topic.contract,
                topic.contract_version
            ),
        ));
    }
    if last.payload_digest.as_deref() != Some(digest) {
        return Err(Refusal::new(
            Reason::PayloadMismatch,
            format!("$.chain[{index}].payload_digest"),
            "the payload's SHA-256 is not the digest the last hop sealed: the payload was \
             replaced or altered after it was written",
        ));
    }
    if envelope.hop_count() > limits.max_hops {
        return Err(Refusal::new(
            Reason::HopLimit,
            "$.chain",
            format!(
                "the chain has {} hops; the limit is {} (a routing loop?)",
                envelope.hop_count(),
                limits.max_hops
            ),
        ));
    }
    let traceparent = traceparent::select(
        &headers.traceparents,
        &envelope.identity.trace_id,
        &last.span_id,
    )
    .ok_or_else(|| {
        Refusal::new(
            Reason::BadTraceparent,
            format!("$.headers.{TRACEPARENT_HEADER}"),
            "no traceparent names the envelope's trace and the last hop's span",
        )
    })?;
    if let Some(degraded) = headers.degraded {
        if degraded != envelope.markers() {
            return Err(Refusal::new(
                Reason::InvalidValue,
                format!("$.headers.{DEGRADED_HEADER}"),
                format!("{DEGRADED_HEADER} header disagrees with the chain's degradation markers"),
            ));
        }
    }
    Ok(traceparent)
}
