//! The dead-letter header reader (`hopchain-dlq-*`): any headers give a summary whose words
//! are in their vocabularies, or say which header keeps them from one.
//!
//! Input: the settings byte (unused), then the headers' names and values in turn.
#![no_main]

use hopchain_core::deadletter::{read_summary, Unread};
use hopchain_core::rules::ERROR_TYPES;
use hopchain_core::Reason;
use hopchain_core_fuzz::{headers, Input};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let input = Input::new(data);
    let headers = headers(&input.fields);
    let reasons = Reason::ALL.map(Reason::as_str);
    match read_summary(&headers, &reasons) {
        Ok(summary) => {
            assert!(ERROR_TYPES.contains(&summary.error_type), "{summary:?}");
            assert!(
                summary
                    .reason
                    .is_none_or(|reason| reasons.contains(&reason)),
                "{summary:?}"
            );
            assert!(summary.parked_at.is_finite(), "{summary:?}");
        }
        Err(Unread::NotUtf8(name)) => assert!(name.starts_with("hopchain-dlq-"), "{name}"),
        Err(Unread::Missing(name) | Unread::Invalid(name) | Unread::Unusual(name)) => {
            assert!(name.starts_with("hopchain-dlq-"), "{name}");
        }
    }
});
