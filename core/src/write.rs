//! Writing (SPEC.md section 7): one new hop, its canonical text written once, sealed over the
//! payload's digest, signed when the writer holds its component's key, and spliced into the
//! received text before LF `],"digests":`. The received hops' bytes are never written again.

use crate::canonical::write;
use crate::digest::{genesis, link, payload_digest, Hex64};
use crate::envelope::Envelope;
use crate::hop::{summary, Hop};
use crate::json::{holds_duplicate, Member, Node, Value};
use crate::layout::{CHAIN_END, CHAIN_START, HOP_SEPARATOR, SIGNATURES};
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

/// The `hopchain-degraded` header of hops with these markers, oldest first.
fn degraded<'a>(hops: impl Iterator<Item = &'a Hop>) -> Option<String> {
    let mut stages: Option<String> = None;
    for stage in hops.filter_map(|hop| hop.degraded_stage.as_deref()) {
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
        degraded: degraded(envelope.hops.iter().chain(std::iter::once(&read))),
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
    let (sealed, read) = seal_hop(hop, payload, 0)?;
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
    let trace_id = crate::rules::string(identity, "trace_id");
    Ok(Written {
        text,
        traceparent: traceparent::format(trace_id, &read.span_id, true),
        degraded: degraded(std::iter::once(&read)),
        hop: read,
        digest,
        signature,
    })
}
