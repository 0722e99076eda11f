//! Whatever the bytes, the reader answers: accepted, or refused with a reason code and a path
//! (SPEC.md section 5: a reader MUST NOT fail otherwise). Random texts, and the vectors'
//! records edited at random: bytes flipped, cut, repeated, and JSON's own tokens spliced in.

mod common;

use common::{load, vector_files, Vector};
use hopchain_core::hop::read_hop;
use hopchain_core::json::parse;
use hopchain_core::layout;
use hopchain_core::{read_envelope, read_record, Header, Limits, Outcome, Reason, Record};
use proptest::prelude::*;

/// Pieces that move a parser to its edges.
const TOKENS: &[&[u8]] = &[
    b"\"",
    b"\\",
    b"\\u",
    b"\\ud800",
    b"\\udc00",
    b"{",
    b"}",
    b"[",
    b"]",
    b",\n",
    b"\n",
    b":",
    b"NaN",
    b"-Infinity",
    b"1e999",
    b"-0",
    b"9007199254740993",
    b"null",
    b",\"chain\":[\n",
    b"\n],\"digests\":",
    b",\"signatures\":",
    b",\"payload\":",
    b"\xff",
    b"\xc3",
    b"\xe2\x80\xa8",
    b"\x00",
];

#[derive(Clone, Debug)]
enum Edit {
    Flip(usize, u8),
    Cut(usize, usize),
    Repeat(usize, usize),
    Insert(usize, usize),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(at, byte)| Edit::Flip(at, byte)),
        (any::<usize>(), 0usize..64).prop_map(|(at, length)| Edit::Cut(at, length)),
        (any::<usize>(), 0usize..64).prop_map(|(at, length)| Edit::Repeat(at, length)),
        (any::<usize>(), 0..TOKENS.len()).prop_map(|(at, token)| Edit::Insert(at, token)),
    ]
}

fn apply(bytes: &mut Vec<u8>, edit: &Edit) {
    if bytes.is_empty() {
        return;
    }
    let at = |position: usize| position % bytes.len();
    match *edit {
        Edit::Flip(position, byte) => {
            let position = at(position);
            if let Some(slot) = bytes.get_mut(position) {
                *slot = byte;
            }
        }
        Edit::Cut(position, length) => {
            let start = at(position);
            let end = (start + length).min(bytes.len());
            bytes.drain(start..end);
        }
        Edit::Repeat(position, length) => {
            let start = at(position);
            let end = (start + length).min(bytes.len());
            let piece: Vec<u8> = bytes.get(start..end).unwrap_or_default().to_vec();
            bytes.splice(start..start, piece);
        }
        Edit::Insert(position, token) => {
            let start = at(position);
            let token = TOKENS.get(token).copied().unwrap_or_default();
            bytes.splice(start..start, token.iter().copied());
        }
    }
}

/// The writer fixture's received texts and new hops' members (as JSON text).
fn append_cases() -> &'static [(Vec<u8>, Vec<u8>)] {
    static CASES: std::sync::OnceLock<Vec<(Vec<u8>, Vec<u8>)>> = std::sync::OnceLock::new();
    CASES.get_or_init(|| {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/append.json");
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let cases: Vec<serde_json::Value> = serde_json::from_str(&text).unwrap_or_default();
        cases
            .iter()
            .map(|case| {
                let received = common::at(case, &["received"]).as_str().unwrap_or_default();
                let hop = serde_json::to_vec(common::at(case, &["hop"])).unwrap_or_default();
                (received.as_bytes().to_vec(), hop)
            })
            .collect()
    })
}

fn vectors() -> &'static [Vector] {
    static VECTORS: std::sync::OnceLock<Vec<Vector>> = std::sync::OnceLock::new();
    VECTORS.get_or_init(|| vector_files().iter().map(|path| load(path)).collect())
}

/// Read a record; the verdict must be a whole one (a refusal names a code and a path).
fn judge(vector: &Vector, value: Option<&[u8]>, headers: &[(Vec<u8>, Option<Vec<u8>>)]) {
    let headers: Vec<Header<'_>> = headers
        .iter()
        .map(|(name, value)| Header {
            name,
            value: value.as_deref(),
        })
        .collect();
    let record = Record {
        value,
        headers: &headers,
    };
    let keyring = (!vector.keyring.is_empty()).then_some(&vector.keyring);
    let limits = Limits {
        max_hops: 2,
        ..Limits::default()
    };
    for limits in [Limits::default(), limits] {
        match read_record(&record, &vector.topic, keyring, &limits) {
            Outcome::Refused(refusal) | Outcome::RefusedAfterPayload { refusal, .. } => {
                assert!(refusal.path.starts_with('$'), "{refusal:?}");
                assert!(Reason::ALL.contains(&refusal.reason));
            }
            Outcome::Accepted(accepted) => {
                assert!(value
                    .and_then(|value| value.get(accepted.payload.clone()))
                    .is_some());
            }
            Outcome::Schema1 => {}
        }
    }
}

#[test]
fn deep_nesting_is_refused_not_followed() {
    let vectors = vectors();
    let Some(vector) = vectors.first() else {
        unreachable!("vectors")
    };
    for depth in [65, 999, 1000, 1001, 100_000] {
        let mut value = vec![b'['; depth];
        value.extend_from_slice(b"NaN");
        value.extend(std::iter::repeat_n(b']', depth));
        let headers = vec![(b"hopchain-envelope".to_vec(), Some(value.clone()))];
        judge(vector, Some(&value), &headers);
        judge(vector, Some(b"{}"), &headers);
        let _ = read_envelope(&value, None);
    }
}

/// Many headers, or an object of many members, are read in about one pass (a quadratic
/// reading of 100,000 of them would take minutes).
#[test]
fn many_headers_and_members_cost_one_pass() {
    let vectors = vectors();
    let Some(vector) = vectors.first() else {
        unreachable!("vectors")
    };
    let names: Vec<Vec<u8>> = (0..100_000)
        .map(|i| format!("x-{i}").into_bytes())
        .collect();
    let mut headers: Vec<(Vec<u8>, Option<Vec<u8>>)> = names
        .iter()
        .map(|name| (name.clone(), Some(b"v".to_vec())))
        .collect();
    headers.extend(
        vector
            .headers
            .iter()
            .map(|(name, value)| (name.clone(), Some(value.clone()))),
    );
    judge(vector, Some(&vector.value), &headers);
    let members: Vec<String> = (0..100_000).map(|i| format!("\"m{i}\":{i}")).collect();
    let object = format!("{{{}}}", members.join(","));
    let parsed = parse(object.as_bytes());
    assert!(parsed.is_ok_and(|parsed| !parsed.duplicate));
    let _ = read_hop(object.as_bytes(), Some(&object), 0);
}

proptest! {
    // 3,000 cases each; HOPCHAIN_PROPTEST_CASES sets another count (a soak).
    #![proptest_config(ProptestConfig {
        cases: std::env::var("HOPCHAIN_PROPTEST_CASES")
            .ok()
            .and_then(|cases| cases.parse().ok())
            .unwrap_or(3000),
        ..ProptestConfig::default()
    })]

    #[test]
    fn edited_records_get_a_verdict(
        which in any::<usize>(),
        target in 0usize..3,
        edits in proptest::collection::vec(edit(), 1..6),
    ) {
        let vectors = vectors();
        prop_assume!(!vectors.is_empty());
        let Some(vector) = vectors.get(which % vectors.len()) else {
            return Ok(());
        };
        let mut value = vector.value.clone();
        let mut headers: Vec<(Vec<u8>, Option<Vec<u8>>)> = vector
            .headers
            .iter()
            .map(|(name, value)| (name.clone(), Some(value.clone())))
            .collect();
        let index = headers.iter().position(|(name, _)| name == b"hopchain-envelope");
        for edit in &edits {
            match (target, index) {
                (0, Some(index)) => {
                    if let Some((_, Some(text))) = headers.get_mut(index) {
                        apply(text, edit);
                    }
                }
                (1, _) => {
                    if let Some((name, _)) = headers.first_mut() {
                        apply(name, edit);
                    }
                }
                _ => apply(&mut value, edit),
            }
        }
        judge(vector, Some(&value), &headers);
    }

    /// The one-pass reading of the usual hop and the careful one agree on every hop text.
    #[test]
    fn the_usual_hop_is_read_as_carefully_as_any(
        which in any::<usize>(),
        edits in proptest::collection::vec(edit(), 0..4),
    ) {
        let vectors = vectors();
        let Some(vector) = vectors.get(which % vectors.len().max(1)) else {
            return Ok(());
        };
        let text = vector
            .headers
            .iter()
            .find(|(name, _)| name == b"hopchain-envelope")
            .map_or(&vector.value, |(_, value)| value);
        let Some(found) = layout::find(text) else {
            return Ok(());
        };
        for (index, range) in found.hops.iter().enumerate() {
            let mut hop = text.get(range.clone()).unwrap_or_default().to_vec();
            for edit in &edits {
                apply(&mut hop, edit);
            }
            let careful = read_hop(&hop, None, index);
            let usual = std::str::from_utf8(&hop)
                .ok()
                .map(|utf8| read_hop(&hop, Some(utf8), index));
            if let Some(usual) = usual {
                prop_assert_eq!(usual, careful);
            }
        }
    }

    /// The writer, given hop members edited at random, writes a text the reader reads back
    /// with that hop last, or refuses with a reason code; it never panics.
    #[test]
    fn what_the_writer_writes_the_reader_reads(
        which in any::<usize>(),
        edits in proptest::collection::vec(edit(), 0..4),
    ) {
        let cases = append_cases();
        let Some((received, hop)) = cases.get(which % cases.len().max(1)) else {
            return Ok(());
        };
        let Ok(envelope) = read_envelope(received, None) else {
            return Ok(());
        };
        let mut members = hop.clone();
        for edit in &edits {
            apply(&mut members, edit);
        }
        let Ok(parsed) = parse(&members) else {
            return Ok(());
        };
        match hopchain_core::append(received, &envelope, &parsed.root, b"{}", None) {
            Ok(written) => {
                let read = read_envelope(&written.text, None);
                prop_assert!(read.is_ok(), "{:?}", read.err());
                let last = read.ok().and_then(|read| read.hops.last().cloned());
                prop_assert_eq!(last.as_ref(), Some(&written.hop));
            }
            Err(refusal) => prop_assert!(refusal.path.starts_with("$.chain")),
        }
    }

    #[test]
    fn random_bytes_get_a_verdict(
        value in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..300)),
        envelope in proptest::collection::vec(any::<u8>(), 0..300),
        traceparent in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..80)),
    ) {
        let vectors = vectors();
        let Some(vector) = vectors.first() else {
            return Ok(());
        };
        let headers = vec![
            (b"traceparent".to_vec(), traceparent),
            (b"hopchain-envelope".to_vec(), Some(envelope.clone())),
        ];
        judge(vector, value.as_deref(), &headers);
        // And the same bytes as an envelope text, and as a JSON text, on their own.
        let _ = read_envelope(&envelope, None);
        let _ = parse(&envelope);
    }
}
