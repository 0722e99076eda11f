//! Sealing one hop, checking a new hop and writing an identity: the parts the writer is made
//! of give the bytes, digests and refusals the whole writer gives.

mod common;

use common::at;
use hopchain_core::digest::payload_digest;
use hopchain_core::json::parse;
use hopchain_core::{append, check_hop, identity_text, read_envelope, seal, Reason};
use serde_json::Value;

fn cases(name: &str) -> Vec<Value> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    serde_json::from_str(&std::fs::read_to_string(path).unwrap_or_default()).unwrap_or_default()
}

fn text<'a>(value: &'a Value, path: &[&str]) -> &'a str {
    at(value, path).as_str().unwrap_or_default()
}

#[test]
fn a_hop_sealed_after_the_head_is_the_hop_append_writes() {
    let cases = cases("append.json");
    assert_eq!(cases.len(), 6);
    let unkeyed = |case: &&Value| {
        at(case, &["keys"])
            .as_object()
            .is_none_or(|keys| keys.is_empty())
    };
    for case in cases.iter().filter(unkeyed) {
        let name = text(case, &["name"]);
        let received = text(case, &["received"]).as_bytes();
        let Ok(envelope) = read_envelope(received, None) else {
            unreachable!("{name}: the received text reads")
        };
        let hop_text = serde_json::to_vec(at(case, &["hop"])).unwrap_or_default();
        let Ok(hop) = parse(&hop_text) else {
            unreachable!("{name}: the hop's members are JSON")
        };
        let payload = text(case, &["payload"]).as_bytes();
        let Ok(written) = append(received, &envelope, &hop.root, payload, None) else {
            unreachable!("{name}: the hop is written")
        };
        let Some(head) = envelope.head().copied() else {
            unreachable!("{name}: the received chain has hops")
        };
        let digest = payload_digest(payload);
        let sealed = seal(
            &head,
            hop.root.clone(),
            Some(&digest),
            envelope.hops.len(),
            None,
        );
        let Ok(sealed) = sealed else {
            unreachable!("{name}: the hop is sealed: {sealed:?}")
        };
        assert_eq!(sealed.digest, written.digest, "{name}");
        assert_eq!(sealed.hop, written.hop, "{name}");
        let line = [b"\n".as_slice(), &sealed.text, b"\n],\"digests\":"].concat();
        assert!(
            written
                .text
                .windows(line.len())
                .any(|window| window == line),
            "{name}: the written text holds the sealed hop as its last line"
        );
    }
}

#[test]
fn a_hop_without_a_payload_keeps_its_null_digest_and_a_bad_hop_is_refused_at_its_path() {
    let cases = cases("append.json");
    let Some(case) = cases.first() else {
        unreachable!("the fixture holds cases")
    };
    let mut members = at(case, &["hop"]).clone();
    if let Some(object) = members.as_object_mut() {
        object.insert("payload_digest".to_owned(), Value::Null);
    }
    let hop_text = serde_json::to_vec(&members).unwrap_or_default();
    let Ok(hop) = parse(&hop_text) else {
        unreachable!("the hop's members are JSON")
    };
    assert_eq!(check_hop(&hop.root, 3), Ok(()));
    let Ok(sealed) = seal(&[b'0'; 64], hop.root.clone(), None, 3, None) else {
        unreachable!("a hop that seals no payload is sealed")
    };
    assert!(String::from_utf8_lossy(&sealed.text).contains("\"payload_digest\":null"));
    assert_eq!(sealed.hop.payload_digest, None);

    if let Some(object) = members.as_object_mut() {
        object.insert("decision".to_owned(), Value::String("shrugged".to_owned()));
    }
    let bad_text = serde_json::to_vec(&members).unwrap_or_default();
    let Ok(bad) = parse(&bad_text) else {
        unreachable!("the hop's members are JSON")
    };
    for refusal in [
        check_hop(&bad.root, 3).err(),
        seal(&[b'0'; 64], bad.root.clone(), None, 3, None).err(),
    ] {
        let Some(refusal) = refusal else {
            unreachable!("an unknown decision is refused")
        };
        assert_eq!(refusal.reason, Reason::UnknownDecision);
        assert_eq!(refusal.path, "$.chain[3].decision");
    }
}

#[test]
fn an_identity_is_written_as_the_origin_writes_it_and_a_legacy_chain_as_it_is() {
    let cases = cases("originate.json");
    assert_eq!(cases.len(), 3);
    for case in &cases {
        let name = text(case, &["name"]);
        let identity = serde_json::to_vec(at(case, &["identity"])).unwrap_or_default();
        let Ok(identity) = parse(&identity) else {
            unreachable!("{name}: the identity's members are JSON")
        };
        let Ok(written) = identity_text(&identity.root, None) else {
            unreachable!("{name}: the identity is written")
        };
        let envelope = at(case, &["headers"])
            .as_array()
            .into_iter()
            .flatten()
            .find(|pair| text(pair, &["0"]) == "hopchain-envelope")
            .map(|pair| text(pair, &["1"]))
            .unwrap_or_default();
        let prefix = envelope.split(",\"chain\":[").next().unwrap_or_default();
        assert_eq!(
            String::from_utf8_lossy(&written),
            format!("{prefix}}}"),
            "{name}"
        );

        let legacy = br#"{"chain":[],"id":"x"}"#;
        let Ok(carried) = identity_text(&identity.root, Some(legacy)) else {
            unreachable!("{name}: an identity with a legacy chain is written")
        };
        let carried = String::from_utf8_lossy(&carried).into_owned();
        assert!(
            carried.contains(r#","legacy":{"chain":[],"id":"x"},"#),
            "{name}"
        );
        let Err(refusal) = identity_text(&identity.root, Some(br#"{"id":"x","chain":[]}"#)) else {
            unreachable!("{name}: a legacy chain out of canonical order is refused")
        };
        assert_eq!(
            (refusal.reason, refusal.path.as_str()),
            (Reason::NotCanonical, "$.legacy")
        );
    }
}
