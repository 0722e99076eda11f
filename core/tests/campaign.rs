//! Records of the mutation campaign of `tests/schemas` (every legacy variant, and a sample
//! of the rest), with the verdict the Python reader reaches on each
//! (`tests/fixtures/campaign.json`, written by `tests/fixtures/make_fixtures.py`).

mod common;

use common::at;
use hopchain_core::digest::unhex;
use hopchain_core::{read_record, Header, Keyring, Limits, Mode, Outcome, Record, Topic};
use serde_json::Value;

fn bytes(value: &Value) -> Option<Vec<u8>> {
    if let Some(text) = at(value, &["text"]).as_str() {
        return Some(text.as_bytes().to_vec());
    }
    at(value, &["hex"]).as_str().and_then(unhex)
}

#[test]
fn the_core_reaches_the_python_readers_verdict_on_the_campaigns_records() {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/campaign.json");
    let cases: Vec<Value> =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap_or_default())
            .unwrap_or_default();
    assert!(cases.len() >= 150);
    let mut wrong = Vec::new();
    for case in &cases {
        let name = at(case, &["name"]).as_str().unwrap_or_default();
        let mut keyring = Keyring::new();
        for (component, key) in at(case, &["keys"]).as_object().into_iter().flatten() {
            keyring.add_hmac(
                component,
                &unhex(key.as_str().unwrap_or_default()).unwrap_or_default(),
            );
        }
        let value = bytes(at(case, &["value"]));
        let held: Vec<(Vec<u8>, Option<Vec<u8>>)> = at(case, &["headers"])
            .as_array()
            .into_iter()
            .flatten()
            .map(|pair| {
                let name = at(pair, &["0"])
                    .as_str()
                    .unwrap_or_default()
                    .as_bytes()
                    .to_vec();
                (name, bytes(at(pair, &["1"])))
            })
            .collect();
        let headers: Vec<Header<'_>> = held
            .iter()
            .map(|(name, value)| Header {
                name,
                value: value.as_deref(),
            })
            .collect();
        let topic_name = at(case, &["topic"]).as_str().unwrap_or_default().to_owned();
        let topic = Topic {
            topic: topic_name,
            mode: if at(case, &["mode"]) == "body" {
                Mode::Body
            } else {
                Mode::Headers
            },
            contract: "claims".to_owned(),
            contract_version: 1,
            writers: Vec::new(),
            binary_payload: false,
        };
        let record = Record {
            value: value.as_deref(),
            headers: &headers,
        };
        let keys = (!keyring.is_empty()).then_some(&keyring);
        let got = match read_record(&record, &topic, keys, &Limits::default()) {
            Outcome::Accepted(_) => None,
            Outcome::Refused(refusal) | Outcome::RefusedAfterPayload { refusal, .. } => {
                Some((refusal.reason.as_str().to_owned(), refusal.path))
            }
            Outcome::Schema1 => Some(("schema_1".to_owned(), "$".to_owned())),
        };
        let expected = at(case, &["expect", "reason"]).as_str().map(|reason| {
            let path = at(case, &["expect", "path"]).as_str().unwrap_or_default();
            (reason.to_owned(), path.to_owned())
        });
        if got != expected {
            wrong.push(format!("{name}: got {got:?}, expected {expected:?}"));
        }
    }
    println!(
        "{} of {} records agree",
        cases.len() - wrong.len(),
        cases.len()
    );
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
