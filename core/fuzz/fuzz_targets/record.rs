//! The whole-record reader (SPEC.md section 5): a record's value and headers, read for a
//! topic, give a verdict: accepted, refused with a reason code, or schema 1's to read.
//!
//! Input: the settings byte (bits 0-1: the keyring; 2: body mode; 3: a tombstone; 4: small
//! limits), then the fields topic, contract, contract version, writers (comma-separated),
//! value, and the headers' names and values in turn.
#![no_main]

use hopchain_core::read::Source;
use hopchain_core::{read_record, traceparent, Limits, Mode, Outcome, Record, Topic};
use hopchain_core_fuzz::{check_refusal, headers, number, Input};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let input = Input::new(data);
    let text = |index| String::from_utf8_lossy(input.field(index)).into_owned();
    let writers = text(3);
    let topic = Topic {
        topic: text(0),
        mode: if input.flag(2) {
            Mode::Body
        } else {
            Mode::Headers
        },
        contract: text(1),
        contract_version: number(input.field(2)),
        writers: writers
            .split(',')
            .filter(|writer| !writer.is_empty())
            .map(str::to_owned)
            .collect(),
        binary_payload: input.flag(5),
    };
    let value = (!input.flag(3)).then(|| input.field(4));
    let headers = headers(input.fields.get(5..).unwrap_or_default());
    let record = Record {
        value,
        headers: &headers,
    };
    let limits = if input.flag(4) {
        Limits {
            max_hops: 2,
            max_record_bytes: 2_000,
        }
    } else {
        Limits::default()
    };
    match read_record(&record, &topic, input.keyring(), &limits) {
        Outcome::Accepted(accepted) => {
            let value = value.unwrap_or_default();
            let payload = value.get(accepted.payload.clone());
            assert!(payload.is_some(), "the payload is outside the value");
            let expected = match topic.mode {
                Mode::Body => Source::Value,
                Mode::Headers => Source::EnvelopeHeader,
            };
            assert_eq!(accepted.source, expected);
            let last = accepted.envelope.last();
            assert_eq!(
                last.and_then(|hop| hop.payload_digest.as_deref()),
                Some(accepted.payload_digest.as_str())
            );
            assert_eq!(
                last.map(|hop| hop.destination.as_str()),
                Some(topic.topic.as_str())
            );
            assert!(accepted.envelope.hop_count() <= limits.max_hops);
            let parent = traceparent::parse(&accepted.traceparent);
            assert_eq!(
                parent.as_ref().map(|parent| &parent.trace_id),
                Some(&accepted.envelope.identity.trace_id)
            );
            assert_eq!(
                parent.as_ref().map(|parent| parent.span_id.as_str()),
                last.map(|hop| hop.span_id.as_str())
            );
        }
        Outcome::Refused(refusal) => check_refusal(&refusal),
        Outcome::RefusedAfterPayload { refusal, payload } => {
            check_refusal(&refusal);
            assert!(value.unwrap_or_default().get(payload).is_some());
        }
        Outcome::Schema1 => {}
    }
});
