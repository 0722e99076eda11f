//! The envelope's identity (SPEC.md section 3.2): read from the text before the chain, and
//! where the legacy chain it may carry (section 6) is, for `legacy.rs` to verify.

use crate::json::{Node, Value};
use crate::object::read_object;
use crate::reason::{Reason, Refusal};
use crate::rules::{integer, member, string, IDENTITY};
use crate::usual::{read_usual, Found};

/// The identity's members, as read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    pub contract: String,
    pub contract_version: i64,
    pub id: String,
    pub intent_key: String,
    pub origin_span_id: String,
    pub run_id: String,
    pub schema_version: String,
    pub trace_id: String,
    pub work_item_id: String,
    /// Whether `legacy` is a schema-1 envelope (not `null`).
    pub has_legacy: bool,
}

/// The usual identity (canonical, valid, no legacy chain, no escape) read in one pass.
fn usual_identity(text: &str) -> Option<Identity> {
    let found: [Found<'_>; 10] = read_usual(text, &IDENTITY)?;
    let text_at = |index: usize| match found.get(index) {
        Some(Found::Str(value)) => Some((*value).to_owned()),
        _ => None,
    };
    Some(Identity {
        contract: text_at(0)?,
        contract_version: match found.get(1) {
            Some(Found::Int(value)) => *value,
            _ => return None,
        },
        id: text_at(2)?,
        intent_key: text_at(3)?,
        origin_span_id: text_at(5)?,
        run_id: text_at(6)?,
        schema_version: text_at(7)?,
        trace_id: text_at(8)?,
        work_item_id: text_at(9)?,
        has_legacy: false,
    })
}

/// What reading an identity ended with, besides a refusal.
#[derive(Clone, Debug, PartialEq)]
pub enum IdentityRead {
    Read(Identity),
    /// It carries a schema-1 chain: the `legacy` member's bytes in the identity's text.
    Legacy(Identity, std::ops::Range<usize>),
}

/// Read the identity's canonical text (with its closing `}`), step 3 and the first part of
/// step 4 of SPEC.md section 5.
pub fn read_identity(identity: &[u8]) -> Result<IdentityRead, Refusal> {
    if let Some(read) = std::str::from_utf8(identity).ok().and_then(usual_identity) {
        return Ok(IdentityRead::Read(read));
    }
    let root = read_object(identity, &IDENTITY, "$", Some("legacy"))?;
    let read = Identity {
        contract: string(&root, "contract").to_owned(),
        contract_version: integer(&root, "contract_version"),
        id: string(&root, "id").to_owned(),
        intent_key: string(&root, "intent_key").to_owned(),
        origin_span_id: string(&root, "origin_span_id").to_owned(),
        run_id: string(&root, "run_id").to_owned(),
        schema_version: string(&root, "schema_version").to_owned(),
        trace_id: string(&root, "trace_id").to_owned(),
        work_item_id: string(&root, "work_item_id").to_owned(),
        has_legacy: !matches!(
            member(&root, "legacy").map(|node| &node.value),
            Some(Value::Null)
        ),
    };
    match member(&root, "legacy") {
        Some(Node {
            value: Value::Null, ..
        }) => Ok(IdentityRead::Read(read)),
        Some(legacy) => Ok(IdentityRead::Legacy(read, legacy.span.clone())),
        None => Err(Refusal::new(
            Reason::MissingField,
            "$",
            "member \"legacy\" is missing",
        )),
    }
}
