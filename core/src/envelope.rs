//! The envelope text read from its bytes: SPEC.md section 5, steps 2 to 8, in that order.
//! Every hop is parsed and checked before any digest; every digest is computed from the bytes.

use std::ops::Range;

use crate::digest::{from_text, genesis, link, Hex64};
use crate::hop::{read_hop, Hop};
use crate::identity::{read_identity, Identity, IdentityRead};
use crate::json::{parse, Value};
use crate::layout::{find, Layout};
use crate::legacy::{read_legacy, Legacy};
use crate::reason::{Reason, Refusal};
use crate::sign::Keyring;

/// An envelope text that passed steps 2 to 8.
#[derive(Clone, Debug)]
pub struct Envelope {
    pub identity: Identity,
    /// The schema-1 chain it continues, if any (its hops come before `hops`).
    pub legacy: Legacy,
    pub layout: Layout,
    pub hops: Vec<Hop>,
    pub digests: Vec<Hex64>,
    pub signatures: Vec<Option<String>>,
    /// The `legacy` member's bytes in the text, when it holds a schema-1 chain.
    pub legacy_text: Option<Range<usize>>,
    /// What follows the signatures: `}`, or in body mode the payload member and `}`.
    pub rest: Range<usize>,
}

impl Envelope {
    /// The last hop (a read envelope has at least one).
    pub fn last(&self) -> Option<&Hop> {
        self.hops.last()
    }

    /// The last digest: what the next hop links to.
    pub fn head(&self) -> Option<&Hex64> {
        self.digests.last()
    }

    /// The `hopchain-degraded` header's value: each marker's stage, oldest first (the
    /// legacy chain's first).
    pub fn markers(&self) -> String {
        let stages: Vec<&str> = self
            .legacy
            .stages
            .iter()
            .map(String::as_str)
            .chain(
                self.hops
                    .iter()
                    .filter_map(|hop| hop.degraded_stage.as_deref()),
            )
            .collect();
        stages.join(",")
    }

    /// Hops in the chain, the legacy chain's included.
    pub fn hop_count(&self) -> usize {
        self.legacy.hops + self.hops.len()
    }
}

fn slice(text: &[u8], range: Range<usize>) -> &[u8] {
    text.get(range).unwrap_or_default()
}

/// How a reader takes the hops' digests and signatures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Links {
    /// Each digest computed from the bytes, each signature verified (step 8): what a
    /// reader of records does.
    Checked,
    /// Digests and signatures read and checked for their form (step 7), then taken as
    /// written: for a tool that shows where a chain breaks. A legacy chain is verified
    /// either way (step 4).
    AsWritten,
}

/// Read an envelope text of schema 2 (a `hopchain-envelope` header, or a body-mode value).
pub fn read_envelope(text: &[u8], keyring: Option<&Keyring>) -> Result<Envelope, Refusal> {
    read_envelope_text(text, keyring, Links::Checked)
}

/// Read an envelope text of schema 2 known to be UTF-8 (a record's reader has checked it).
pub fn read_envelope_str(text: &str, keyring: Option<&Keyring>) -> Result<Envelope, Refusal> {
    read(text.as_bytes(), Some(text), keyring, Links::Checked)
}

/// Read an envelope text of schema 2, its links taken as `links` says.
pub fn read_envelope_text(
    text: &[u8],
    keyring: Option<&Keyring>,
    links: Links,
) -> Result<Envelope, Refusal> {
    read(text, std::str::from_utf8(text).ok(), keyring, links)
}

/// `source` is `text` when it is UTF-8: the usual hop is then read in one pass (else each
/// is read carefully).
fn read(
    text: &[u8],
    source: Option<&str>,
    keyring: Option<&Keyring>,
    links: Links,
) -> Result<Envelope, Refusal> {
    let layout = find(text).ok_or_else(|| {
        Refusal::new(
            Reason::NotCanonical,
            "$",
            "not in the schema-2 layout: identity, then chain (one hop a line), then digests \
             and signatures",
        )
    })?;
    let mut identity_text = slice(text, 0..layout.start).to_vec();
    identity_text.push(b'}');
    let (identity, legacy, legacy_text) = match read_identity(&identity_text)? {
        IdentityRead::Read(identity) => (identity, Legacy::default(), None),
        IdentityRead::Legacy(identity, span) => {
            let legacy = read_legacy(slice(&identity_text, span.clone()), &identity, keyring)?;
            // The identity's text is the envelope's up to the chain: the same offsets.
            (identity, legacy, Some(span))
        }
    };
    if layout.hops.len() == 1 && layout.hops.first().is_some_and(|hop| hop.is_empty()) {
        return Err(Refusal::new(
            Reason::InvalidValue,
            "$.chain",
            "a chain has at least one hop",
        ));
    }
    let mut hops = Vec::with_capacity(layout.hops.len());
    for (index, range) in layout.hops.iter().enumerate() {
        let hop_text = source.and_then(|source| source.get(range.clone()));
        hops.push(read_hop(slice(text, range.clone()), hop_text, index)?);
    }
    let digests = read_digests(slice(text, layout.digests()), hops.len())?;
    let signatures = read_signatures(slice(text, layout.signatures()), hops.len())?;
    let rest = layout.close + 1..text.len();
    if links == Links::AsWritten {
        return Ok(Envelope {
            identity,
            legacy,
            layout,
            hops,
            digests,
            signatures,
            legacy_text,
            rest,
        });
    }
    let mut previous = genesis(&identity_text);
    let keyring = keyring.filter(|keyring| !keyring.is_empty());
    for (index, range) in layout.hops.iter().enumerate() {
        let digest = link(&previous, slice(text, range.clone()));
        if digests.get(index) != Some(&digest) {
            return Err(Refusal::new(
                Reason::BadDigest,
                format!("$.digests[{index}]"),
                format!(
                    "hop {index} does not match its digest: it, a hop before it or the \
                     envelope's own members were altered after it was sealed"
                ),
            ));
        }
        if let (Some(keyring), Some(hop)) = (keyring, hops.get(index)) {
            check_signature(keyring, hop, &digest, signatures.get(index), index)?;
        }
        previous = digest;
    }
    Ok(Envelope {
        identity,
        legacy,
        layout,
        hops,
        digests,
        signatures,
        legacy_text,
        rest,
    })
}

fn check_signature(
    keyring: &Keyring,
    hop: &Hop,
    digest: &Hex64,
    signature: Option<&Option<String>>,
    index: usize,
) -> Result<(), Refusal> {
    if !keyring.has_key(&hop.component) {
        return Ok(());
    }
    let path = format!("$.chain[{index}]");
    match signature {
        Some(Some(signature)) if keyring.verify(&hop.component, digest, signature) => Ok(()),
        Some(Some(_)) => Err(Refusal::new(
            Reason::BadSignature,
            path,
            format!(
                "hop claims component {:?} but its signature does not verify with that \
                 component's key: forged, altered, or the chain was cut after it",
                hop.component
            ),
        )),
        _ => Err(Refusal::new(
            Reason::UnsignedHop,
            path,
            format!(
                "hop claims component {:?}, whose hops must be signed, but carries no signature",
                hop.component
            ),
        )),
    }
}

/// A JSON array as a strict parser of the reference reader reads it (no lone surrogate).
fn strict_array(text: &[u8]) -> Option<Option<Vec<Value<'_>>>> {
    match parse(text) {
        Ok(parsed) if !parsed.lone_surrogate => Some(match parsed.root.value {
            Value::Array(items) => Some(items.into_iter().map(|node| node.value).collect()),
            _ => None,
        }),
        _ => None,
    }
}

/// The usual digests' text, `["<64 hex>",...]` with one per hop, read without parsing.
fn usual_digests(text: &[u8], count: usize) -> Option<Vec<Hex64>> {
    // `[`, then `"<64>"` and a separator (`,`, or `]` after the last) per digest.
    if text.len() != 1 + 67 * count || text.first() != Some(&b'[') {
        return None;
    }
    let mut digests = Vec::with_capacity(count);
    for (index, item) in text.get(1..)?.chunks_exact(67).enumerate() {
        let separator = if index + 1 == count { b']' } else { b',' };
        if item.first() != Some(&b'"')
            || item.get(65) != Some(&b'"')
            || item.get(66) != Some(&separator)
        {
            return None;
        }
        digests.push(from_text(item.get(1..65)?)?);
    }
    Some(digests)
}

/// Step 7: the digests, one per hop, canonical.
fn read_digests(text: &[u8], count: usize) -> Result<Vec<Hex64>, Refusal> {
    if let Some(digests) = usual_digests(text, count) {
        return Ok(digests);
    }
    let items = strict_array(text)
        .ok_or_else(|| Refusal::new(Reason::BadJson, "$.digests", "digests are not JSON"))?;
    let invalid = || {
        Refusal::new(
            Reason::InvalidValue,
            "$.digests",
            "one digest (64 lowercase hex digits) per hop",
        )
    };
    let items = items.ok_or_else(invalid)?;
    if items.len() != count {
        return Err(invalid());
    }
    let mut digests = Vec::with_capacity(count);
    for item in &items {
        match item {
            Value::Str(value) => digests.push(from_text(value.as_bytes()).ok_or_else(invalid)?),
            _ => return Err(invalid()),
        }
    }
    if text != canonical_list(digests.iter().map(|digest| Some(&digest[..]))) {
        return Err(Refusal::new(
            Reason::NotCanonical,
            "$.digests",
            "digests not canonical",
        ));
    }
    Ok(digests)
}

fn canonical_list<'a>(items: impl Iterator<Item = Option<&'a [u8]>>) -> Vec<u8> {
    let mut out = vec![b'['];
    for (index, item) in items.enumerate() {
        if index > 0 {
            out.push(b',');
        }
        match item {
            Some(text) => {
                out.push(b'"');
                out.extend_from_slice(text);
                out.push(b'"');
            }
            None => out.extend_from_slice(b"null"),
        }
    }
    out.push(b']');
    out
}

/// `hmac-sha256:<64 hex>` or `ed25519:<16 hex>:<128 hex>`.
pub fn is_signature(text: &str) -> bool {
    let hex = |part: &str, length: usize| {
        part.len() == length
            && part
                .bytes()
                .all(|byte| matches!(byte, b'0'..=b'9' | b'a'..=b'f'))
    };
    if let Some(value) = text.strip_prefix("hmac-sha256:") {
        return hex(value, 64);
    }
    match text
        .strip_prefix("ed25519:")
        .and_then(|rest| rest.split_once(':'))
    {
        Some((id, value)) => hex(id, 16) && hex(value, 128),
        None => false,
    }
}

/// Step 7: the signatures, one (or `null`) per hop, canonical.
fn read_signatures(text: &[u8], count: usize) -> Result<Vec<Option<String>>, Refusal> {
    let unsigned = canonical_list(std::iter::repeat_n(None, count));
    if text == unsigned {
        return Ok(vec![None; count]); // no hop signed: the usual case
    }
    let items = strict_array(text)
        .ok_or_else(|| Refusal::new(Reason::BadJson, "$.signatures", "signatures are not JSON"))?;
    let items = items.filter(|items| items.len() == count).ok_or_else(|| {
        Refusal::new(
            Reason::InvalidValue,
            "$.signatures",
            "one signature (or null) per hop",
        )
    })?;
    let mut signatures = Vec::with_capacity(count);
    for (index, item) in items.into_iter().enumerate() {
        match item {
            Value::Null => signatures.push(None),
            Value::Str(value) if is_signature(&value) => signatures.push(Some(value.into_owned())),
            _ => {
                return Err(Refusal::new(
                    Reason::InvalidValue,
                    format!("$.signatures[{index}]"),
                    "a signature is hmac-sha256:<64 hex> or ed25519:<16 hex key id>:<128 hex>",
                ))
            }
        }
    }
    let written = canonical_list(
        signatures
            .iter()
            .map(|item| item.as_deref().map(str::as_bytes)),
    );
    if text != written {
        return Err(Refusal::new(
            Reason::NotCanonical,
            "$.signatures",
            "signatures not canonical",
        ));
    }
    Ok(signatures)
}
