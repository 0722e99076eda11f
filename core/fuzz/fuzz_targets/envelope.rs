//! The envelope text reader (SPEC.md section 5, steps 2 to 8): any bytes, read with any of
//! the keyrings, give an envelope or a refusal with a reason code.
//!
//! Input: the settings byte (bits 0-1: the keyring), then the envelope text.
#![no_main]

use hopchain_core::read_envelope;
use hopchain_core_fuzz::{check_refusal, Input};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let input = Input::new(data);
    let text = data.get(1..).unwrap_or_default();
    match read_envelope(text, input.keyring()) {
        Ok(envelope) => {
            let hops = envelope.hops.len();
            assert!(hops > 0, "an envelope without a hop was read");
            assert_eq!(envelope.digests.len(), hops);
            assert_eq!(envelope.signatures.len(), hops);
            assert_eq!(envelope.layout.hops.len(), hops);
            assert!(text.get(envelope.rest.clone()).is_some());
            assert_eq!(envelope.hop_count(), envelope.legacy.hops + hops);
        }
        Err(refusal) => check_refusal(&refusal),
    }
});
