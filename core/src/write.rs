//! Writing (SPEC.md section 7): one new hop, its canonical text written once, sealed over the
//! payload's digest, signed when the writer holds its component's key, and spliced into the
//! received text before LF `],"digests":`. The received hops' bytes are never written again.

use crate::canonical::write;
use crate::digest::{genesis, link, payload_digest, Hex64};
use crate::envelope::Envelope;
use crate::hop::{summary, Hop};
use crate::identity::{read_identity, IdentityRead};
use crate::json::{holds_duplicate, Member, Node, Value};
use crate::layout::{CHAIN_END, CHAIN_START, HOP_SEPARATOR, SIGNATURES};
use crate::legacy::{read_legacy, Legacy};
use crate::path::Path;
use crate::reason::{Reason, Refusal};
use crate::rules::{check, HOP, IDENTITY};
use crate::sign::Keyring;
use crate::traceparent;

/// An envelope text with its new hop, and what goes in the record's headers with it.
#[derive(Clone, Debug)]
pub struct Written {
    /// The envelope text (headers mode: the `hopchain-envelope` header).
    pub text: Vec<u8>,
    pub hop: Hop,
    pub digest: Hex64,
    pub signature: Option<String>,
    /// The `traceparent` to send: the envelope's trace, the new hop's span.
    pub traceparent: String,
    /// The `hopchain-degraded` header, when a hop carries a marker.
    pub degraded: Option<String>,
}

impl Written {
    /// The record value of a body-mode topic: the text with the payload as its last member.
    pub fn body(&self, payload: &[u8]) -> Vec<u8> {
        let mut value = self.text.clone();
        value.pop();
        value.extend_from_slice(crate::read::PAYLOAD_MEMBER);
        value.extend_from_slice(payload);
        value.push(b'}');
        value
    }
}

/// The hop's members with `payload_digest` naming the payload (the writer seals it so).
fn with_payload_digest<'a>(hop: &Node<'a>, digest: &Hex64) -> Result<Node<'a>, Refusal> {
    let Value::Object(members) = &hop.value else {
        return Err(Refusal::new(
            Reason::WrongType,
            "$.chain",
            "a hop is an object",
        ));
    };
    let mut members: Vec<Member<'a>> = members
        .iter()
        .filter(|member| member.name != "payload_digest")
        .cloned()
        .collect();
    members.push(Member {
        name: "payload_digest".into(),
        node: Node {
            value: Value::Str(String::from_utf8_lossy(digest).into_owned().into()),
            span: 0..0,
        },
    });
    Ok(Node {
        value: Value::Object(members),
        span: 0..0,
    })
}

/// The new hop's canonical text, checked as a reader will check it.
fn seal_hop(hop: &Node<'_>, payload: &[u8], index: usize) -> Result<(Vec<u8>, Hop), Refusal> {
    if holds_duplicate(hop) {
        return Err(duplicate(&format!("$.chain[{index}]")));
    }
    let hop = with_payload_digest(hop, &payload_digest(payload))?;
    checked_text(&hop, index)
}

/// As `seal_hop`, for a hop the writer owns (its members are moved, not copied) and a
/// payload whose digest is known.
fn seal_owned(hop: Node<'_>, digest: &Hex64, index: usize) -> Result<(Vec<u8>, Hop), Refusal> {
    if holds_duplicate(&hop) {
        return Err(duplicate(&format!("$.chain[{index}]")));
    }
    let Value::Object(mut members) = hop.value else {
        return Err(Refusal::new(
            Reason::WrongType,
            "$.chain",
            "a hop is an object",
        ));
    };
    members.retain(|member| member.name != "payload_digest");
    members.push(Member {
        name: "payload_digest".into(),
        node: Node {
            value: Value::Str(String::from_utf8_lossy(digest).into_owned().into()),
            span: 0..0,
        },
    });
    checked_text(
        &Node {
            value: Value::Object(members),
            span: 0..0,
        },
        index,
    )
}

/// A sealed hop checked as a reader will check it, and its canonical text.
fn checked_text(hop: &Node<'_>, index: usize) -> Result<(Vec<u8>, Hop), Refusal> {
    check(&HOP, hop, &Path::Root(&format!("$.chain[{index}]")), "")?;
    let mut text = Vec::with_capacity(512);
    write(&mut text, hop, b"", None);
    Ok((text, summary(hop)))
}

/// A member given twice: a reader would refuse the text (which one counts is ambiguous).
fn duplicate(path: &str) -> Refusal {
    Refusal::new(
        Reason::BadJson,
        path,
        "a member appears twice: which one counts is ambiguous",
    )
}

/// The signatures' canonical text, written onto `out`.
fn write_signatures<'a>(out: &mut Vec<u8>, signatures: impl Iterator<Item = Option<&'a str>>) {
    out.push(b'[');
    for (index, signature) in signatures.enumerate() {
        if index > 0 {
            out.push(b',');
        }
        match signature {
            Some(text) => crate::text::write_string(out, text),
            None => out.extend_from_slice(b"null"),
        }
    }
    out.push(b']');
}

/// The `hopchain-degraded` header of hops with these markers, oldest first (a carried-over
/// schema-1 chain's `legacy` stages first).
fn degraded<'a>(legacy: &'a [String], hops: impl Iterator<Item = &'a Hop>) -> Option<String> {
    let mut stages: Option<String> = None;
    let hop_stages = hops.filter_map(|hop| hop.degraded_stage.as_deref());
    for stage in legacy.iter().map(String::as_str).chain(hop_stages) {
        match &mut stages {
            Some(joined) => {
                joined.push(',');
                joined.push_str(stage);
            }
            None => stages = Some(stage.to_owned()),
        }
    }
    stages
}

/// A new hop's members (`payload_digest` `null` or a digest) checked as a reader will check
/// them at `$.chain[index]` (SPEC.md section 5, step 6): a hop refused here is refused with
/// the code and path a reader would give it.
pub fn check_hop(hop: &Node<'_>, index: usize) -> Result<(), Refusal> {
    let path = format!("$.chain[{index}]");
    if holds_duplicate(hop) {
        return Err(duplicate(&path));
    }
    check(&HOP, hop, &Path::Root(&path), "")
}

/// A hop sealed after the digest `previous`: its canonical text, digest and signature.
#[derive(Clone, Debug)]
pub struct Sealed {
    pub text: Vec<u8>,
    pub digest: Hex64,
    pub signature: Option<String>,
    pub hop: Hop,
}

/// Seal hop `index` of a chain after `previous` (the digest before it, or the genesis).
///
/// `payload_digest`: the digest of the payload the hop goes with, written into the hop in
/// place of its own member; None keeps the member as given (`null` for a hop that seals no
/// payload, such as one appended before the last). The hop is checked as a reader will
/// check it, then signed when `keyring` holds its component's key.
pub fn seal(
    previous: &Hex64,
    hop: Node<'_>,
    payload_digest: Option<&Hex64>,
    index: usize,
    keyring: Option<&Keyring>,
) -> Result<Sealed, Refusal> {
    let (text, read) = match payload_digest {
        Some(digest) => seal_owned(hop, digest, index)?,
        None => {
            check_hop(&hop, index)?;
            let mut text = Vec::with_capacity(512);
            write(&mut text, &hop, b"", None);
            (text, summary(&hop))
        }
    };
    let digest = link(previous, &text);
    let signature = keyring.and_then(|keyring| keyring.sign(&read.component, &digest));
    Ok(Sealed {
        text,
        digest,
        signature,
        hop: read,
    })
}

/// The identity's canonical text (SPEC.md section 3.2), checked as a reader will check it.
///
/// `legacy`: the canonical text of a carried-over schema-1 envelope, written as it is in
/// member `legacy` (whatever `identity` holds there); None writes the member as given.
pub fn identity_text(identity: &Node<'_>, legacy: Option<&[u8]>) -> Result<Vec<u8>, Refusal> {
    if holds_duplicate(identity) {
        return Err(duplicate("$"));
    }
    check(&IDENTITY, identity, &Path::Root("$"), "")?;
    let mut text = Vec::with_capacity(512);
    let Some(legacy) = legacy else {
        write(&mut text, identity, b"", None);
        return Ok(text);
    };
    let parsed = crate::json::parse(legacy)
        .map_err(|_| Refusal::new(Reason::BadJson, "$.legacy", "the legacy chain is not JSON"))?;
    if parsed.duplicate || !crate::canonical::is_canonical(&parsed.root, legacy, None) {
        return Err(Refusal::new(
            Reason::NotCanonical,
            "$.legacy",
            "the legacy chain is not in canonical form",
        ));
    }
    let Value::Object(members) = &identity.value else {
        return Err(Refusal::new(
            Reason::WrongType,
            "$",
            "the identity is an object",
        ));
    };
    let members: Vec<Member<'_>> = members
        .iter()
        .map(|member| Member {
            name: member.name.clone(),
            node: if member.name == "legacy" {
                Node {
                    value: Value::Null,
                    span: 0..legacy.len(),
                }
            } else {
                member.node.clone()
            },
        })
        .collect();
    let identity = Node {
        value: Value::Object(members),
        span: 0..0,
    };
    write(&mut text, &identity, legacy, Some("legacy"));
    Ok(text)
}

/// Append a hop to a received envelope text (`received`, as `envelope` was read from it).
///
/// `hop` holds the new hop's members (its `payload_digest` is set here, from `payload`).
pub fn append(
    received: &[u8],
    envelope: &Envelope,
    hop: &Node<'_>,
    payload: &[u8],
    keyring: Option<&Keyring>,
) -> Result<Written, Refusal> {
    let sealed = seal_hop(hop, payload, envelope.hops.len())?;
    splice(received, envelope, sealed, keyring)
}

/// As `append`, for a hop the writer owns and a payload whose digest (`payload_digest`)
/// the reader computed already: the same bytes, without copying the hop or hashing the
/// payload again.
pub fn append_owned(
    received: &[u8],
    envelope: &Envelope,
    hop: Node<'_>,
    payload_digest: &Hex64,
    keyring: Option<&Keyring>,
) -> Result<Written, Refusal> {
    let sealed = seal_owned(hop, payload_digest, envelope.hops.len())?;
    splice(received, envelope, sealed, keyring)
}

/// The received text with a sealed hop spliced in: its digest, its signature, the rest.
fn splice(
    received: &[u8],
    envelope: &Envelope,
    (sealed, read): (Vec<u8>, Hop),
    keyring: Option<&Keyring>,
) -> Result<Written, Refusal> {
    let previous = envelope.head().copied().ok_or_else(|| {
        Refusal::new(
            Reason::InvalidValue,
            "$.chain",
            "a chain has at least one hop",
        )
    })?;
    let digest = link(&previous, &sealed);
    let signature = keyring.and_then(|keyring| keyring.sign(&read.component, &digest));
    let layout = &envelope.layout;
    let signatures = envelope
        .signatures
        .iter()
        .map(Option::as_deref)
        .chain(std::iter::once(signature.as_deref()));
    let mut text = Vec::with_capacity(received.len() + sealed.len() + 256);
    text.extend_from_slice(received.get(..layout.end).unwrap_or_default());
    text.extend_from_slice(HOP_SEPARATOR);
    text.extend_from_slice(&sealed);
    text.extend_from_slice(received.get(layout.end..layout.middle).unwrap_or_default());
    text.extend_from_slice(b",\"");
    text.extend_from_slice(&digest);
    text.extend_from_slice(b"\"]");
    text.extend_from_slice(SIGNATURES);
    write_signatures(&mut text, signatures);
    text.push(b'}');
    Ok(Written {
        text,
        traceparent: traceparent::format(&envelope.identity.trace_id, &read.span_id, true),
        degraded: degraded(
            &envelope.legacy.stages,
            envelope.hops.iter().chain(std::iter::once(&read)),
        ),
        hop: read,
        digest,
        signature,
    })
}

/// Start a chain: the identity's canonical text (its `legacy` `null`) and its first hop.
pub fn originate(
    identity: &Node<'_>,
    hop: &Node<'_>,
    payload: &[u8],
    keyring: Option<&Keyring>,
) -> Result<Written, Refusal> {
    if holds_duplicate(identity) {
        return Err(duplicate("$"));
    }
    check(&IDENTITY, identity, &Path::Root("$"), "")?;
    if !matches!(
        crate::rules::member(identity, "legacy").map(|node| &node.value),
        Some(Value::Null)
    ) {
        return Err(Refusal::new(
            Reason::InvalidValue,
            "$.legacy",
            "a new chain carries no legacy chain",
        ));
    }
    let mut identity_text = Vec::new();
    write(&mut identity_text, identity, b"", None);
    let sealed = seal_hop(hop, payload, 0)?;
    let trace_id = crate::rules::string(identity, "trace_id").to_owned();
    start(identity_text, &trace_id, &[], sealed, keyring)
}

/// Start a chain over an identity's canonical text, read as a reader reads it: its `legacy`
/// `null`, or a carried-over schema-1 envelope (checked, its markers' stages first in the
/// `hopchain-degraded` header). `hop` is the first schema-2 hop, sealed over the payload
/// whose digest is `payload_digest`.
pub fn originate_over(
    identity_text: &[u8],
    hop: Node<'_>,
    payload_digest: &Hex64,
    keyring: Option<&Keyring>,
) -> Result<Written, Refusal> {
    let (identity, legacy) = match read_identity(identity_text)? {
        IdentityRead::Read(identity) => (identity, Legacy::default()),
        IdentityRead::Legacy(identity, span) => {
            let raw = identity_text.get(span).unwrap_or_default();
            let legacy = read_legacy(raw, &identity, keyring)?;
            (identity, legacy)
        }
    };
    let sealed = seal_owned(hop, payload_digest, 0)?;
    start(
        identity_text.to_vec(),
        &identity.trace_id,
        &legacy.stages,
        sealed,
        keyring,
    )
}

/// The text of a chain whose first schema-2 hop is `sealed`, after `identity_text`.
fn start(
    identity_text: Vec<u8>,
    trace_id: &str,
    legacy: &[String],
    (sealed, read): (Vec<u8>, Hop),
    keyring: Option<&Keyring>,
) -> Result<Written, Refusal> {
    let digest = link(&genesis(&identity_text), &sealed);
    let signature = keyring.and_then(|keyring| keyring.sign(&read.component, &digest));
    let mut text = identity_text;
    text.pop();
    text.extend_from_slice(CHAIN_START);
    text.extend_from_slice(&sealed);
    text.extend_from_slice(CHAIN_END);
    text.extend_from_slice(b"[\"");
    text.extend_from_slice(&digest);
    text.extend_from_slice(b"\"]");
    text.extend_from_slice(SIGNATURES);
    write_signatures(&mut text, std::iter::once(signature.as_deref()));
    text.push(b'}');
    Ok(Written {
        text,
        traceparent: traceparent::format(trace_id, &read.span_id, true),
        degraded: degraded(legacy, std::iter::once(&read)),
        hop: read,
        digest,
        signature,
    })
}
