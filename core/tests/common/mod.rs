//! What the integration tests share: the test vectors of SPEC.md section 9, read as records.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use hopchain_core::{Header, Keyring, Limits, Mode, Outcome, Record, Topic};
use serde_json::Value;

/// The repository's `tests/vectors/v2`, beside this crate.
pub fn vectors_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("tests")
        .join("vectors")
        .join("v2")
}

/// Every vector file, sorted by name.
pub fn vector_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(vectors_dir())
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|entry| entry.path())
                .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    files
}

/// One vector: its record, the reader's configuration, and the verdict expected.
pub struct Vector {
    pub name: String,
    pub topic: Topic,
    pub keyring: Keyring,
    pub value: Vec<u8>,
    pub headers: Vec<(Vec<u8>, Vec<u8>)>,
    pub reason: Option<String>,
    pub path: Option<String>,
}

/// The value at a path of member names (and array positions), Null where there is none.
pub fn at<'a>(value: &'a Value, path: &[&str]) -> &'a Value {
    path.iter()
        .try_fold(value, |value, part| match part.parse::<usize>() {
            Ok(index) => value.get(index),
            Err(_) => value.get(*part),
        })
        .unwrap_or(&Value::Null)
}

fn text(value: &Value) -> String {
    value.as_str().unwrap_or_default().to_owned()
}

fn unhex(text: &str) -> Vec<u8> {
    hopchain_core::digest::unhex(text).unwrap_or_default()
}

pub fn load(path: &Path) -> Vector {
    let raw = std::fs::read_to_string(path).unwrap_or_default();
    let vector: Value = serde_json::from_str(&raw).unwrap_or(Value::Null);
    let mode = if at(&vector, &["mode"]) == "body" {
        Mode::Body
    } else {
        Mode::Headers
    };
    let mut keyring = Keyring::new();
    if let Some(keys) = at(&vector, &["keys"]).as_object() {
        for (component, key) in keys {
            keyring.add_hmac(component, &unhex(key.as_str().unwrap_or_default()));
        }
    }
    if let Some(keys) = at(&vector, &["public_keys"]).as_object() {
        for (component, list) in keys {
            for key in list.as_array().into_iter().flatten() {
                if let Ok(public) = <[u8; 32]>::try_from(unhex(key.as_str().unwrap_or_default())) {
                    keyring.add_public(component, &public);
                }
            }
        }
    }
    let headers = at(&vector, &["headers"])
        .as_array()
        .into_iter()
        .flatten()
        .map(|pair| {
            (
                text(pair.get(0).unwrap_or(&Value::Null)).into_bytes(),
                text(pair.get(1).unwrap_or(&Value::Null)).into_bytes(),
            )
        })
        .collect();
    Vector {
        name: text(at(&vector, &["name"])),
        topic: Topic {
            topic: text(at(&vector, &["topic"])),
            mode,
            contract: text(at(&vector, &["contract", "0"])),
            contract_version: at(&vector, &["contract", "1"]).as_i64().unwrap_or_default(),
            writers: Vec::new(),
            binary_payload: false,
        },
        keyring,
        value: text(at(&vector, &["value"])).into_bytes(),
        headers,
        reason: at(&vector, &["expect", "reason"])
            .as_str()
            .map(str::to_owned),
        path: at(&vector, &["expect", "path"]).as_str().map(str::to_owned),
    }
}

/// The verdict on a vector: (reason, path), or None when accepted. The payload contract of
/// every vector is `{"number": integer, "amount_cents": integer}` (SPEC.md section 9); its
/// payloads all meet it, so a refusal after the payload's step stands.
pub fn verdict(vector: &Vector) -> Option<(String, String)> {
    let headers: Vec<Header<'_>> = vector
        .headers
        .iter()
        .map(|(name, value)| Header {
            name,
            value: Some(value),
        })
        .collect();
    let record = Record {
        value: Some(&vector.value),
        headers: &headers,
    };
    let keyring = (!vector.keyring.is_empty()).then_some(&vector.keyring);
    match hopchain_core::read_record(&record, &vector.topic, keyring, &Limits::default()) {
        Outcome::Accepted(_) => None,
        Outcome::Refused(refusal) | Outcome::RefusedAfterPayload { refusal, .. } => {
            Some((refusal.reason.as_str().to_owned(), refusal.path))
        }
        Outcome::Schema1 => Some(("schema_1".to_owned(), "$".to_owned())),
    }
}
