//! The dead-letter header reader (`hopchain-dlq-*`): any headers give a summary whose words
//! are in their vocabularies, or say which header keeps them from one; an index entry's
//! identity holds only ids an index keeps (one line of printable ASCII, 1 to 200 bytes).
//!
//! Input: the settings byte (bit 0: the whole input is also the letter's value), then the
//! headers' names and values in turn. Every field of UTF-8 is also read as a parking envelope.
#![no_main]

use hopchain_core::deadletter::{read_entry, read_parking_identity, Identity, Unread};
use hopchain_core::rules::ERROR_TYPES;
use hopchain_core::Reason;
use hopchain_core_fuzz::{headers, Input};
use libfuzzer_sys::fuzz_target;

fn check_identity(identity: &Identity<'_>) {
    for id in [&identity.id, &identity.trace_id, &identity.intent_key]
        .into_iter()
        .flatten()
    {
        assert!(
            (1..=200).contains(&id.len()) && id.bytes().all(|byte| (b' '..=b'~').contains(&byte)),
            "{identity:?}"
        );
    }
}

fuzz_target!(|data: &[u8]| {
    let input = Input::new(data);
    let headers = headers(&input.fields);
    let reasons = Reason::ALL.map(Reason::as_str);
    let value = (input.settings & 1 == 1).then_some(data);
    match read_entry(&headers, value, &reasons) {
        Ok(entry) => {
            let summary = &entry.summary;
            assert!(ERROR_TYPES.contains(&summary.error_type), "{summary:?}");
            assert!(
                summary
                    .reason
                    .is_none_or(|reason| reasons.contains(&reason)),
                "{summary:?}"
            );
            assert!(summary.parked_at.is_finite(), "{summary:?}");
            assert!(entry.redrive_count >= 0, "{entry:?}");
            if let Some(identity) = &entry.identity {
                check_identity(identity);
            }
        }
        Err(Unread::NotUtf8(name)) => assert!(name.starts_with("hopchain-dlq-"), "{name}"),
        Err(Unread::Missing(name) | Unread::Invalid(name) | Unread::Unusual(name)) => {
            assert!(name.starts_with("hopchain-"), "{name}");
        }
    }
    for text in input
        .fields
        .iter()
        .filter_map(|field| std::str::from_utf8(field).ok())
    {
        match read_parking_identity(text) {
            Ok(identity) => check_identity(&identity),
            Err(unread) => assert_eq!(unread, Unread::Unusual("hopchain-dlq-envelope")),
        }
    }
});
