//! A topic whose payloads are in a binary format (Confluent's schema-registry framing): its
//! value is neither checked to be UTF-8 nor searched for `NaN`, and its digest still binds it.

mod common;

use common::{load, vector_files, verdict};
use hopchain_core::Mode;

/// Framed bytes as a schema-registry serializer writes them: not UTF-8, and holding `NaN`.
const FRAMED: &[u8] = b"\x00\x00\x00\x00\x07\xff\xfeNaN\x02";

#[test]
fn a_binary_payload_skips_the_text_checks_and_is_still_bound_by_its_digest() {
    let mut seen = 0;
    for path in vector_files() {
        let mut vector = load(&path);
        if vector.reason.is_some() || vector.topic.mode != Mode::Headers {
            continue;
        }
        seen += 1;
        vector.value = FRAMED.to_vec();
        let as_text = verdict(&vector).map(|(reason, _)| reason);
        vector.topic.binary_payload = true;
        let as_bytes = verdict(&vector).map(|(reason, _)| reason);

        assert_eq!(as_text.as_deref(), Some("not_utf8"), "{}", vector.name);
        // Past the text checks, the last hop's digest of other bytes refuses it.
        assert_eq!(
            as_bytes.as_deref(),
            Some("payload_mismatch"),
            "{}",
            vector.name
        );
    }
    assert!(seen > 0, "some vectors are accepted headers-mode records");
}
