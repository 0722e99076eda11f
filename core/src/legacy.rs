//! A schema-1 chain carried in the identity's `legacy` member (SPEC.md section 6, and step 4
//! of section 5): a schema-1 envelope as that schema reads it (members with a default may be
//! left out, members it does not declare are kept), in canonical form, of this envelope, its
//! hops linked and signed by schema 1's rules.

use sha2::{Digest, Sha256};

use crate::canonical;
use crate::digest::{from_text, hex};
use crate::identity::Identity;
use crate::json::{parse, Node, Value};
use crate::reason::{Reason, Refusal};
use crate::rules::{DECISIONS, ERROR_TYPES, MAX_INT};
use crate::sign::Keyring;
use crate::text::{is_digest, is_envelope_id, is_name, is_timestamp, is_topic, write_string};

/// What schema 1 requires of a value (pydantic's strict reading of JSON).
enum Kind {
    /// A string: length bounds in code points, and a shape.
    Text(usize, usize, fn(&str) -> bool),
    Integer(i128),
    Boolean,
    Word(&'static [&'static str]),
    Nullable(&'static Kind),
    List(&'static Kind),
    /// A model: its members, each with its default's JSON when it may be left out.
    Model(&'static [(&'static str, Kind, Option<&'static str>)]),
}

fn any_text(_: &str) -> bool {
    true
}
fn lower_hex_not_zero(text: &str, length: usize) -> bool {
    text.len() == length
        && text
            .bytes()
            .all(|byte| matches!(byte, b'0'..=b'9' | b'a'..=b'f'))
        && text.bytes().any(|byte| byte != b'0')
}
fn trace_id(text: &str) -> bool {
    lower_hex_not_zero(text, 32)
}
fn span_id(text: &str) -> bool {
    lower_hex_not_zero(text, 16)
}
fn version(text: &str) -> bool {
    match text.split_once('.') {
        Some((major, minor)) => [major, minor].iter().all(|part| {
            (1..=4).contains(&part.len()) && part.bytes().all(|byte| byte.is_ascii_digit())
        }),
        None => false,
    }
}
fn signature(text: &str) -> bool {
    crate::envelope::is_signature(text)
}

const IDENTIFIER: Kind = Kind::Text(1, 200, is_name);
const SHORT: Kind = Kind::Text(0, 1000, any_text);
const TIMESTAMP: Kind = Kind::Text(0, usize::MAX, is_timestamp);
const DIGEST: Kind = Kind::Text(0, usize::MAX, is_digest);
const ERROR_TYPE: Kind = Kind::Word(ERROR_TYPES);
const ATTEMPT: Kind = Kind::Model(&[
    ("description", Kind::Nullable(&SHORT), Some("null")),
    ("duration_ms", Kind::Integer(0), None),
    ("error_type", Kind::Nullable(&ERROR_TYPE), Some("null")),
    (
        "kind",
        Kind::Word(&["first", "transport", "contract"]),
        None,
    ),
    ("number", Kind::Integer(1), None),
    ("outcome", Kind::Word(&["succeeded", "failed"]), None),
    ("started_at", TIMESTAMP, None),
]);
const EFFECT: Kind = Kind::Model(&[
    ("identifier", IDENTIFIER, None),
    (
        "kind",
        Kind::Word(&["record_written", "message_published", "call_accepted"]),
        None,
    ),
    ("target", IDENTIFIER, None),
]);
const ISSUE: Kind = Kind::Model(&[
    ("code", Kind::Text(0, usize::MAX, is_reason_code), None),
    ("message", SHORT, None),
    ("path", Kind::Text(0, 300, any_text), None),
]);
fn is_reason_code(text: &str) -> bool {
    Reason::from_code(text).is_some()
}
const FAILURE: Kind = Kind::Model(&[
    ("attempts", Kind::List(&ATTEMPT), Some("[]")),
    ("component", IDENTIFIER, None),
    ("description", Kind::Text(0, 2000, any_text), Some("\"\"")),
    ("effects", Kind::List(&EFFECT), Some("[]")),
    ("error_type", ERROR_TYPE, None),
    ("locally_resolvable", Kind::Boolean, None),
    (
        "recovery_hint",
        Kind::Nullable(&Kind::Text(0, 500, any_text)),
        Some("null"),
    ),
    ("run_id", Kind::Nullable(&IDENTIFIER), Some("null")),
    ("validation_errors", Kind::List(&ISSUE), Some("[]")),
    ("work_item_id", Kind::Nullable(&IDENTIFIER), Some("null")),
]);
const DEGRADATION: Kind = Kind::Model(&[
    ("error_type", ERROR_TYPE, None),
    ("reason", SHORT, None),
    ("stage", IDENTIFIER, None),
]);
const POSITION: Kind = Kind::Model(&[
    ("offset", Kind::Integer(0), None),
    ("partition", Kind::Integer(0), None),
    ("topic", Kind::Text(0, usize::MAX, is_topic), None),
]);
const HOP: Kind = Kind::Model(&[
    ("attempts", Kind::List(&ATTEMPT), Some("[]")),
    ("component", IDENTIFIER, None),
    ("decided_at", TIMESTAMP, None),
    ("decision", Kind::Word(DECISIONS), None),
    ("degradation", Kind::Nullable(&DEGRADATION), Some("null")),
    (
        "destination",
        Kind::Nullable(&Kind::Text(0, usize::MAX, is_topic)),
        Some("null"),
    ),
    ("digest", DIGEST, None),
    ("effects", Kind::List(&EFFECT), Some("[]")),
    ("failure", Kind::Nullable(&FAILURE), Some("null")),
    ("instance", IDENTIFIER, None),
    ("observation", SHORT, Some("\"\"")),
    ("prev_digest", DIGEST, None),
    ("received_at", Kind::Nullable(&TIMESTAMP), Some("null")),
    ("received_from", Kind::Nullable(&POSITION), Some("null")),
    ("seq", Kind::Integer(0), None),
    (
        "signature",
        Kind::Nullable(&Kind::Text(0, usize::MAX, signature)),
        Some("null"),
    ),
    ("span_id", Kind::Text(0, usize::MAX, span_id), None),
]);
const ENVELOPE: Kind = Kind::Model(&[
    ("chain", Kind::List(&HOP), Some("[]")),
    ("contract", IDENTIFIER, None),
    ("contract_version", Kind::Integer(1), None),
    ("head", DIGEST, None),
    ("id", Kind::Text(0, usize::MAX, is_envelope_id), None),
    ("intent_key", IDENTIFIER, None),
    ("origin_span_id", Kind::Text(0, usize::MAX, span_id), None),
    ("run_id", IDENTIFIER, None),
    (
        "schema_version",
        Kind::Text(0, usize::MAX, version),
        Some("\"1.0\""),
    ),
    ("trace_id", Kind::Text(0, usize::MAX, trace_id), None),
    ("work_item_id", IDENTIFIER, None),
]);

fn fits(kind: &Kind, node: &Node<'_>) -> bool {
    match (kind, &node.value) {
        (Kind::Nullable(_), Value::Null) => true,
        (Kind::Nullable(inner), _) => fits(inner, node),
        (Kind::Boolean, Value::Bool(_)) => true,
        (Kind::Integer(min), Value::Int(value)) => value >= min,
        (Kind::Word(words), Value::Str(word)) => words.contains(&word.as_ref()),
        (Kind::Text(min, max, shape), Value::Str(text)) => {
            let length = text.chars().count();
            length >= *min && length <= *max && shape(text)
        }
        (Kind::List(item), Value::Array(items)) => items.iter().all(|node| fits(item, node)),
        (Kind::Model(members), Value::Object(given)) => {
            members.iter().all(|(name, kind, default)| {
                match given.iter().find(|member| member.name == *name) {
                    Some(member) => fits(kind, &member.node),
                    None => default.is_some(),
                }
            })
        }
        _ => false,
    }
}

/// Whether every integer satisfies `test` (the schema-1 reader reads the legacy chain as
/// orjson does: 64-bit integers as integers, larger ones as floats).
fn all_integers(node: &Node<'_>, test: fn(i128) -> bool) -> bool {
    match &node.value {
        Value::Int(value) => test(*value),
        Value::Array(items) => items.iter().all(|item| all_integers(item, test)),
        Value::Object(members) => members
            .iter()
            .all(|member| all_integers(&member.node, test)),
        _ => true,
    }
}

fn within_64_bits(value: i128) -> bool {
    (i128::from(i64::MIN)..=i128::from(u64::MAX)).contains(&value)
}

/// The model's JSON as schema 1 writes it for a digest: every member it declares (its
/// default where left out) and every other member it holds, sorted, `skip` left out.
fn write_model(out: &mut Vec<u8>, node: &Node<'_>, kind: &Kind, skip: &[&str]) {
    match (kind, &node.value) {
        (Kind::Nullable(inner), value) if !matches!(value, Value::Null) => {
            write_model(out, node, inner, skip);
        }
        (Kind::List(item), Value::Array(items)) => {
            out.push(b'[');
            for (index, element) in items.iter().enumerate() {
                if index > 0 {
                    out.push(b',');
                }
                write_model(out, element, item, &[]);
            }
            out.push(b']');
        }
        (Kind::Model(members), Value::Object(given)) => {
            let mut parts: Vec<(&str, Vec<u8>)> = Vec::new();
            for member in given
                .iter()
                .filter(|member| !skip.contains(&member.name.as_ref()))
            {
                let mut text = Vec::new();
                match members.iter().find(|(name, _, _)| *name == member.name) {
                    Some((_, kind, _)) => write_model(&mut text, &member.node, kind, &[]),
                    None => canonical::write(&mut text, &member.node, b"", None),
                }
                parts.push((&member.name, text));
            }
            for (name, _, default) in members.iter().filter(|(name, _, _)| !skip.contains(name)) {
                if let (Some(default), false) =
                    (default, given.iter().any(|member| member.name == *name))
                {
                    parts.push((name, default.as_bytes().to_vec()));
                }
            }
            parts.sort_by(|a, b| a.0.cmp(b.0));
            out.push(b'{');
            for (index, (name, text)) in parts.iter().enumerate() {
                if index > 0 {
                    out.push(b',');
                }
                write_string(out, name);
                out.push(b':');
                out.extend_from_slice(text);
            }
            out.push(b'}');
        }
        _ => canonical::write(out, node, b"", None),
    }
}

fn member<'a, 'b>(node: &'a Node<'b>, name: &str) -> Option<&'a Node<'b>> {
    match &node.value {
        Value::Object(members) => members.iter().find(|m| m.name == name).map(|m| &m.node),
        _ => None,
    }
}

fn text_of<'a>(node: &'a Node<'_>, name: &str, default: &'a str) -> &'a str {
    match member(node, name).map(|node| &node.value) {
        Some(Value::Str(text)) => text,
        _ => default,
    }
}

/// What a reader keeps of a legacy chain: how many hops, and their degradation stages.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Legacy {
    pub hops: usize,
    pub stages: Vec<String>,
}

fn refuse(reason: Reason, path: impl Into<String>, message: &str) -> Refusal {
    Refusal::new(reason, path, message)
}

/// Read and verify the legacy chain `raw` (the `legacy` member's text) of `identity`.
pub fn read_legacy(
    raw: &[u8],
    identity: &Identity,
    keyring: Option<&Keyring>,
) -> Result<Legacy, Refusal> {
    let invalid = |message: &str| refuse(Reason::InvalidValue, "$.legacy", message);
    let parsed = parse(raw).map_err(|_| invalid("not JSON"))?;
    let root = parsed.root;
    if !fits(&ENVELOPE, &root) {
        return Err(invalid("not a schema-1 envelope"));
    }
    if !all_integers(&root, |value| {
        !within_64_bits(value) || value.abs() <= MAX_INT
    }) {
        return Err(invalid("integers in an envelope stay within +-(2**53 - 1)"));
    }
    // Beyond 64 bits a number is read as a float, which has another spelling.
    let version = text_of(&root, "schema_version", "1.0");
    if !all_integers(&root, within_64_bits)
        || !canonical::is_canonical(&root, raw, None)
        || !version.starts_with("1.")
    {
        return Err(refuse(
            Reason::NotCanonical,
            "$.legacy",
            "legacy chain not canonical",
        ));
    }
    let own = [
        ("id", &identity.id),
        ("intent_key", &identity.intent_key),
        ("trace_id", &identity.trace_id),
        ("origin_span_id", &identity.origin_span_id),
        ("run_id", &identity.run_id),
        ("work_item_id", &identity.work_item_id),
    ];
    if own
        .iter()
        .any(|(name, value)| text_of(&root, name, "") != value.as_str())
    {
        return Err(refuse(
            Reason::BadDigest,
            "$.legacy",
            "the legacy chain belongs to another envelope",
        ));
    }
    let hops: &[Node<'_>] = match member(&root, "chain").map(|node| &node.value) {
        Some(Value::Array(hops)) => hops,
        _ => &[],
    };
    let mut material = b"hopchain/genesis/v1".to_vec();
    for name in ["id", "intent_key", "trace_id", "run_id", "work_item_id"] {
        material.push(0x1f);
        material.extend_from_slice(text_of(&root, name, "").as_bytes());
    }
    let mut expected = hex(&Sha256::digest(&material));
    let mut stages = Vec::new();
    for (index, hop) in hops.iter().enumerate() {
        let path = format!("$.chain[{index}]");
        if !matches!(member(hop, "seq").map(|node| &node.value), Some(Value::Int(seq)) if *seq == i128::try_from(index).unwrap_or(-1))
        {
            return Err(refuse(
                Reason::BadDigest,
                format!("{path}.seq"),
                "a hop was removed, inserted or moved",
            ));
        }
        if text_of(hop, "prev_digest", "") != expected {
            return Err(refuse(
                Reason::BadDigest,
                format!("{path}.prev_digest"),
                "the hop does not link to the hop before it",
            ));
        }
        let mut sealed = Vec::new();
        write_model(&mut sealed, hop, &HOP, &["digest", "signature"]);
        let digest = hex(&Sha256::digest(&sealed));
        let stored = text_of(hop, "digest", "");
        if digest != stored {
            return Err(refuse(
                Reason::BadDigest,
                format!("{path}.digest"),
                "the hop does not match its digest: it was altered after it was sealed",
            ));
        }
        let component = text_of(hop, "component", "");
        if let Some(keyring) = keyring.filter(|keyring| keyring.has_key(component)) {
            let Some(Value::Str(signed)) = member(hop, "signature").map(|node| &node.value) else {
                return Err(refuse(
                    Reason::UnsignedHop,
                    format!("{path}.signature"),
                    "the hop's component must sign its hops",
                ));
            };
            let verified = from_text(stored.as_bytes())
                .is_some_and(|digest| keyring.verify(component, &digest, signed));
            if !verified {
                return Err(refuse(
                    Reason::BadSignature,
                    format!("{path}.signature"),
                    "the signature does not verify with the component's key",
                ));
            }
        }
        if let Some(degradation) =
            member(hop, "degradation").filter(|node| !matches!(node.value, Value::Null))
        {
            stages.push(text_of(degradation, "stage", "").to_owned());
        }
        expected = digest;
    }
    if text_of(&root, "head", "") != expected {
        return Err(refuse(
            Reason::BadDigest,
            "$.head",
            "the head is not the last hop's digest: a hop was removed from or added to the end",
        ));
    }
    Ok(Legacy {
        hops: hops.len(),
        stages,
    })
}
