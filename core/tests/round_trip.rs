//! The writer against hopchain's Python writer: the same received text, hop members, payload
//! and keys give the same bytes (`tests/fixtures/append.json`), and the reader accepts them.

mod common;

use common::at;
use hopchain_core::digest::{payload_digest, unhex};
use hopchain_core::json::parse;
use hopchain_core::{
    append, append_owned, read_envelope, read_record, Header, Keyring, Limits, Mode, Outcome,
    Record, Topic,
};
use serde_json::Value;

fn fixture() -> Vec<Value> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/append.json");
    let text = std::fs::read_to_string(path).unwrap_or_default();
    serde_json::from_str(&text).unwrap_or_default()
}

fn text<'a>(value: &'a Value, path: &[&str]) -> &'a str {
    at(value, path).as_str().unwrap_or_default()
}

fn keyring(case: &Value) -> Keyring {
    let mut keyring = Keyring::new();
    for (component, key) in at(case, &["keys", "hmac"])
        .as_object()
        .into_iter()
        .flatten()
    {
        keyring.add_hmac(
            component,
            &unhex(key.as_str().unwrap_or_default()).unwrap_or_default(),
        );
    }
    for (component, seed) in at(case, &["keys", "ed25519"])
        .as_object()
        .into_iter()
        .flatten()
    {
        let seed = unhex(seed.as_str().unwrap_or_default()).unwrap_or_default();
        if let Ok(seed) = <[u8; 32]>::try_from(seed) {
            keyring.add_signing(component, &seed);
        }
    }
    keyring
}

#[test]
fn appending_a_hop_writes_the_bytes_the_python_writer_writes() {
    let cases = fixture();
    assert_eq!(cases.len(), 6);
    for case in &cases {
        let name = text(case, &["name"]);
        let keyring = keyring(case);
        let keys = (!keyring.is_empty()).then_some(&keyring);
        let received = text(case, &["received"]).as_bytes();
        let envelope = read_envelope(received, keys);
        let Ok(envelope) = envelope else {
            unreachable!("{name}: the received text reads: {envelope:?}")
        };
        let hop_text = serde_json::to_vec(at(case, &["hop"])).unwrap_or_default();
        let Ok(hop) = parse(&hop_text) else {
            unreachable!("{name}: the hop's members are JSON")
        };
        let payload = text(case, &["payload"]).as_bytes();
        let written = append(received, &envelope, &hop.root, payload, keys);
        let Ok(written) = written else {
            unreachable!("{name}: the hop is written: {written:?}")
        };
        let body = text(case, &["mode"]) == "body";
        let expected_headers: Vec<(String, String)> = at(case, &["headers"])
            .as_array()
            .into_iter()
            .flatten()
            .map(|pair| (text(pair, &["0"]).to_owned(), text(pair, &["1"]).to_owned()))
            .collect();
        let header = |wanted: &str| {
            expected_headers
                .iter()
                .find(|(name, _)| name == wanted)
                .map(|(_, value)| value.as_str())
        };
        if body {
            assert_eq!(
                String::from_utf8_lossy(&written.body(payload)),
                text(case, &["value"]),
                "{name}"
            );
        } else {
            assert_eq!(text(case, &["value"]), text(case, &["payload"]), "{name}");
            assert_eq!(
                Some(String::from_utf8_lossy(&written.text).as_ref()),
                header("hopchain-envelope"),
                "{name}"
            );
        }
        assert_eq!(
            Some(written.traceparent.as_str()),
            header("traceparent"),
            "{name}"
        );
        assert_eq!(
            written.degraded.as_deref(),
            header("hopchain-degraded"),
            "{name}"
        );

        // And the record written reads back, its new hop last.
        let value = if body {
            written.body(payload)
        } else {
            payload.to_vec()
        };
        let mut headers = vec![Header {
            name: b"traceparent",
            value: Some(written.traceparent.as_bytes()),
        }];
        if let Some(degraded) = &written.degraded {
            headers.push(Header {
                name: b"hopchain-degraded",
                value: Some(degraded.as_bytes()),
            });
        }
        if !body {
            headers.push(Header {
                name: b"hopchain-envelope",
                value: Some(&written.text),
            });
        }
        let topic = Topic {
            topic: text(case, &["topic"]).to_owned(),
            mode: if body { Mode::Body } else { Mode::Headers },
            contract: "claims".to_owned(),
            contract_version: 1,
            writers: Vec::new(),
            binary_payload: false,
        };
        let record = Record {
            value: Some(&value),
            headers: &headers,
        };
        match read_record(&record, &topic, keys, &Limits::default()) {
            Outcome::Accepted(accepted) => {
                assert_eq!(accepted.envelope.hops.len(), 4, "{name}");
                assert_eq!(accepted.envelope.last(), Some(&written.hop), "{name}");
                assert_eq!(value.get(accepted.payload.clone()), Some(payload), "{name}");
            }
            other => unreachable!("{name}: the record written is refused: {other:?}"),
        }
    }
}

#[test]
fn starting_a_chain_writes_the_bytes_the_python_writer_writes() {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/originate.json");
    let cases: Vec<Value> =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap_or_default())
            .unwrap_or_default();
    assert_eq!(cases.len(), 3);
    for case in &cases {
        let name = text(case, &["name"]);
        let keyring = keyring(case);
        let keys = (!keyring.is_empty()).then_some(&keyring);
        let identity = serde_json::to_vec(at(case, &["identity"])).unwrap_or_default();
        let hop = serde_json::to_vec(at(case, &["hop"])).unwrap_or_default();
        let (Ok(identity), Ok(hop)) = (parse(&identity), parse(&hop)) else {
            unreachable!("{name}: the members are JSON")
        };
        let payload = text(case, &["payload"]).as_bytes();
        let written = hopchain_core::originate(&identity.root, &hop.root, payload, keys);
        let Ok(written) = written else {
            unreachable!("{name}: the chain starts: {written:?}")
        };
        let headers: Vec<(&str, &str)> = at(case, &["headers"])
            .as_array()
            .into_iter()
            .flatten()
            .map(|pair| (text(pair, &["0"]), text(pair, &["1"])))
            .collect();
        let expected = |wanted: &str| {
            headers
                .iter()
                .find(|(name, _)| *name == wanted)
                .map(|(_, value)| *value)
        };
        assert_eq!(
            Some(String::from_utf8_lossy(&written.text).as_ref()),
            expected("hopchain-envelope"),
            "{name}"
        );
        assert_eq!(
            Some(written.traceparent.as_str()),
            expected("traceparent"),
            "{name}"
        );
        assert_eq!(written.degraded, None, "{name}");
    }
}

#[test]
fn the_writer_refuses_a_hop_the_reader_would_refuse() {
    let cases = fixture();
    let Some(case) = cases.first() else {
        unreachable!("cases in the fixture")
    };
    let received = text(case, &["received"]).as_bytes();
    let Ok(envelope) = read_envelope(received, None) else {
        unreachable!("the received text reads")
    };
    let mut members = at(case, &["hop"]).clone();
    if let Some(object) = members.as_object_mut() {
        object.insert("decision".into(), Value::from("improvised"));
    }
    let hop_text = serde_json::to_vec(&members).unwrap_or_default();
    let Ok(hop) = parse(&hop_text) else {
        unreachable!("JSON")
    };
    let refused = append(received, &envelope, &hop.root, b"{}", None).err();
    assert_eq!(
        refused.map(|refusal| (refusal.reason.as_str(), refusal.path)),
        Some(("unknown_decision", "$.chain[3].decision".to_owned()))
    );
}

#[test]
fn appending_an_owned_hop_writes_what_append_writes() {
    // `append_owned` (the hop moved, the payload's digest given) against `append` (the hop
    // borrowed, the payload hashed) on every case, and on a refused hop.
    for case in &fixture() {
        let name = text(case, &["name"]);
        let keyring = keyring(case);
        let keys = (!keyring.is_empty()).then_some(&keyring);
        let received = text(case, &["received"]).as_bytes();
        let Ok(envelope) = read_envelope(received, keys) else {
            unreachable!("{name}: the received text reads")
        };
        let payload = text(case, &["payload"]).as_bytes();
        let digest = payload_digest(payload);
        for decision in ["forwarded", "improvised"] {
            let mut members = at(case, &["hop"]).clone();
            if let Some(object) = members.as_object_mut() {
                object.insert("decision".into(), Value::from(decision));
            }
            let hop_text = serde_json::to_vec(&members).unwrap_or_default();
            let Ok(hop) = parse(&hop_text) else {
                unreachable!("{name}: JSON")
            };
            let borrowed = append(received, &envelope, &hop.root, payload, keys);
            let owned = append_owned(received, &envelope, hop.root, &digest, keys);
            match (borrowed, owned) {
                (Ok(borrowed), Ok(owned)) => {
                    assert_eq!(borrowed.text, owned.text, "{name}");
                    assert_eq!(borrowed.traceparent, owned.traceparent, "{name}");
                    assert_eq!(borrowed.degraded, owned.degraded, "{name}");
                    assert_eq!(borrowed.signature, owned.signature, "{name}");
                    assert_eq!(borrowed.hop, owned.hop, "{name}");
                }
                (Err(borrowed), Err(owned)) => {
                    assert_eq!(borrowed.reason, owned.reason, "{name}");
                    assert_eq!(borrowed.path, owned.path, "{name}");
                    assert_eq!(decision, "improvised", "{name}");
                }
                (borrowed, owned) => {
                    unreachable!("{name}: {decision}: append {borrowed:?}, owned {owned:?}")
                }
            }
        }
    }
}
