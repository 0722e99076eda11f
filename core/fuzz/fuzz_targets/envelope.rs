//! The envelope text reader (SPEC.md section 5, steps 2 to 8): any bytes, read with any of
//! the keyrings, give an envelope or a refusal with a reason code; read with the links taken
//! as written, the same, and never a refusal the checked reading does not make but for step
//! 8's (so a text read checked is read as written).
//!
//! Input: the settings byte (bits 0-1: the keyring), then the envelope text.
#![no_main]

use hopchain_core::{read_envelope, read_envelope_text, Envelope, Links, Reason, Refusal};
use hopchain_core_fuzz::{check_refusal, Input};
use libfuzzer_sys::fuzz_target;

fn check_read(envelope: &Envelope, text: &[u8]) {
    let hops = envelope.hops.len();
    assert!(hops > 0, "an envelope without a hop was read");
    assert_eq!(envelope.digests.len(), hops);
    assert_eq!(envelope.signatures.len(), hops);
    assert_eq!(envelope.layout.hops.len(), hops);
    assert!(text.get(envelope.rest.clone()).is_some());
    assert_eq!(envelope.hop_count(), envelope.legacy.hops + hops);
    if let Some(span) = &envelope.legacy_text {
        assert!(
            span.end <= envelope.layout.start,
            "the legacy chain is in the identity"
        );
    }
}

/// Step 8's refusals: a schema-2 hop's digest or signature that does not hold.
fn of_the_links(refusal: &Refusal) -> bool {
    match refusal.reason {
        Reason::BadDigest => refusal.path.starts_with("$.digests["),
        Reason::BadSignature | Reason::UnsignedHop => refusal.path.starts_with("$.chain["),
        _ => false,
    }
}

fuzz_target!(|data: &[u8]| {
    let input = Input::new(data);
    let text = data.get(1..).unwrap_or_default();
    let checked = read_envelope(text, input.keyring());
    let written = read_envelope_text(text, input.keyring(), Links::AsWritten);
    match (&checked, &written) {
        (Ok(checked), Ok(written)) => {
            check_read(checked, text);
            check_read(written, text);
            assert_eq!(checked.digests, written.digests);
        }
        (Err(refusal), Ok(written)) => {
            check_refusal(refusal);
            assert!(of_the_links(refusal), "refused before step 8: {refusal:?}");
            check_read(written, text);
        }
        (Err(checked), Err(written)) => {
            check_refusal(checked);
            assert!(
                !of_the_links(checked),
                "step 8 refused as written: {checked:?}"
            );
            assert_eq!(checked, written, "the same refusal before step 8");
        }
        (Ok(_), Err(refusal)) => unreachable!("read checked, refused as written: {refusal:?}"),
    }
});
