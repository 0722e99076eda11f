//! Digests and signatures against the values the Python implementation computes
//! (`tests/fixtures/crypto.json`, written by `tests/fixtures/make_fixtures.py`).

mod common;

use common::at;
use hopchain_core::digest::{from_text, genesis, link, payload_digest, unhex};
use hopchain_core::sign::key_id;
use hopchain_core::Keyring;
use serde_json::Value;

fn fixture() -> Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/crypto.json");
    let text = std::fs::read_to_string(path).unwrap_or_default();
    serde_json::from_str(&text).unwrap_or(Value::Null)
}

fn text<'a>(value: &'a Value, name: &str) -> &'a str {
    at(value, &[name]).as_str().unwrap_or_default()
}

fn cases<'a>(fixture: &'a Value, name: &str) -> &'a [Value] {
    at(fixture, &[name])
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
}

fn digest(text: &str) -> [u8; 64] {
    from_text(text.as_bytes()).unwrap_or([0; 64])
}

#[test]
fn genesis_digests_are_pythons() {
    let fixture = fixture();
    let cases = cases(&fixture, "genesis");
    assert!(!cases.is_empty());
    for case in cases {
        let computed = genesis(text(case, "identity").as_bytes());
        assert_eq!(&computed[..], text(case, "digest").as_bytes());
    }
}

#[test]
fn hop_links_are_pythons() {
    let fixture = fixture();
    let cases = cases(&fixture, "links");
    assert_eq!(cases.len(), 3);
    for case in cases {
        let computed = link(
            &digest(text(case, "previous")),
            text(case, "hop").as_bytes(),
        );
        assert_eq!(&computed[..], text(case, "digest").as_bytes());
    }
}

#[test]
fn payload_digests_are_pythons() {
    let fixture = fixture();
    for case in cases(&fixture, "payloads") {
        let computed = payload_digest(text(case, "payload").as_bytes());
        assert_eq!(&computed[..], text(case, "digest").as_bytes());
    }
}

#[test]
fn hmac_signatures_are_pythons_and_verify() {
    let fixture = fixture();
    let cases = cases(&fixture, "hmac");
    assert_eq!(cases.len(), 6);
    for case in cases {
        let component = text(case, "component");
        let mut keyring = Keyring::new();
        keyring.add_hmac(component, &unhex(text(case, "key")).unwrap_or_default());
        let digest = digest(text(case, "digest"));
        let signature = keyring.sign(component, &digest);
        assert_eq!(signature.as_deref(), Some(text(case, "signature")));
        assert!(keyring.verify(component, &digest, text(case, "signature")));
        assert!(!keyring.verify("other", &digest, text(case, "signature")));
        let mut other = digest;
        other[0] = if other[0] == b'0' { b'1' } else { b'0' };
        assert!(!keyring.verify(component, &other, text(case, "signature")));
    }
}

#[test]
fn ed25519_signatures_and_key_ids_are_pythons_and_verify() {
    let fixture = fixture();
    let cases = cases(&fixture, "ed25519");
    assert_eq!(cases.len(), 6);
    for case in cases {
        let component = text(case, "component");
        let seed = <[u8; 32]>::try_from(unhex(text(case, "seed")).unwrap_or_default());
        let public = <[u8; 32]>::try_from(unhex(text(case, "public")).unwrap_or_default());
        let (Ok(seed), Ok(public)) = (seed, public) else {
            unreachable!("32-byte keys in the fixture")
        };
        assert_eq!(key_id(&public), text(case, "key_id"));
        let digest = digest(text(case, "digest"));
        let mut signer = Keyring::new();
        signer.add_signing(component, &seed);
        assert_eq!(
            signer.sign(component, &digest).as_deref(),
            Some(text(case, "signature"))
        );
        let mut reader = Keyring::new();
        reader.add_public(component, &public);
        assert!(reader.verify(component, &digest, text(case, "signature")));
        // A reader holding only an HMAC key of the component verifies no Ed25519 signature.
        let mut hmac_only = Keyring::new();
        hmac_only.add_hmac(component, b"secret");
        assert!(!hmac_only.verify(component, &digest, text(case, "signature")));
        let mut other = digest;
        other[63] = if other[63] == b'0' { b'1' } else { b'0' };
        assert!(!reader.verify(component, &other, text(case, "signature")));
    }
}
