//! The writer (SPEC.md section 7): a hop appended to an envelope text the reader accepted, or
//! a chain started, is written as a text the reader accepts with that hop last, and as a
//! record the reader accepts; or the writer refuses with a reason code.
//!
//! Input: the settings byte (bits 0-1: the keyring; 2: start a chain), then the fields
//! received envelope text (or, to start a chain, the identity's members as JSON), the new
//! hop's members as JSON, and the payload.
#![no_main]

use hopchain_core::digest::payload_digest;
use hopchain_core::json::{parse, uses_non_finite};
use hopchain_core::{
    append, originate, read_envelope, read_record, Header, Keyring, Limits, Mode, Outcome, Record,
    Topic, Written,
};
use hopchain_core_fuzz::{check_refusal, Input};
use libfuzzer_sys::fuzz_target;

/// The text written reads back with the new hop last, its digest the head.
fn reads_back(written: &Written, keyring: Option<&Keyring>, hops: usize, payload: &[u8]) {
    let read = read_envelope(&written.text, keyring);
    let envelope = match read {
        Ok(envelope) => envelope,
        Err(refusal) => {
            unreachable!("the reader refuses what the writer wrote: {refusal:?}")
        }
    };
    assert_eq!(envelope.hops.len(), hops);
    assert_eq!(envelope.last(), Some(&written.hop));
    assert_eq!(envelope.head(), Some(&written.digest));
    assert_eq!(envelope.signatures.last(), Some(&written.signature));
    let digest = payload_digest(payload);
    assert_eq!(
        written.hop.payload_digest.as_deref().map(str::as_bytes),
        Some(&digest[..])
    );
}

/// The record written (headers mode: the payload is the value) is accepted by a reader of the
/// topic the new hop names, unless the payload itself is refused.
fn record_reads_back(written: &Written, keyring: Option<&Keyring>, payload: &[u8]) {
    let mut headers = vec![
        Header {
            name: b"traceparent",
            value: Some(written.traceparent.as_bytes()),
        },
        Header {
            name: b"hopchain-envelope",
            value: Some(&written.text),
        },
    ];
    if let Some(degraded) = &written.degraded {
        headers.push(Header {
            name: b"hopchain-degraded",
            value: Some(degraded.as_bytes()),
        });
    }
    let record = Record {
        value: Some(payload),
        headers: &headers,
    };
    let topic = Topic {
        topic: written.hop.destination.to_string(),
        mode: Mode::Headers,
        contract: written.hop.contract.to_string(),
        contract_version: written.hop.contract_version,
        writers: Vec::new(),
        binary_payload: false,
    };
    let limits = Limits {
        max_hops: usize::MAX,
        max_record_bytes: usize::MAX,
    };
    let payload_readable =
        !payload.is_empty() && std::str::from_utf8(payload).is_ok() && !uses_non_finite(payload);
    match read_record(&record, &topic, keyring, &limits) {
        Outcome::Accepted(_) => {}
        Outcome::Refused(refusal) if !payload_readable => check_refusal(&refusal),
        outcome => unreachable!("the reader refuses the record the writer wrote: {outcome:?}"),
    }
}

fuzz_target!(|data: &[u8]| {
    let input = Input::new(data);
    let keyring = input.keyring();
    let Ok(hop) = parse(input.field(1)) else {
        return;
    };
    let payload = input.field(2);
    let (written, hops) = if input.flag(2) {
        let Ok(identity) = parse(input.field(0)) else {
            return;
        };
        (originate(&identity.root, &hop.root, payload, keyring), 1)
    } else {
        let received = input.field(0);
        let Ok(envelope) = read_envelope(received, keyring) else {
            return;
        };
        let hops = envelope.hops.len() + 1;
        (
            append(received, &envelope, &hop.root, payload, keyring),
            hops,
        )
    };
    match written {
        Ok(written) => {
            reads_back(&written, keyring, hops, payload);
            record_reads_back(&written, keyring, payload);
        }
        Err(refusal) => check_refusal(&refusal),
    }
});
