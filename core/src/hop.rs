//! A hop (SPEC.md section 3.3) read from its sealed bytes: what a reader needs of it.

use crate::json::{Node, Value};
use crate::object::read_object;
use crate::reason::Refusal;
use crate::rules::{integer, member, string, HOP};
use crate::usual::{read_usual, Found};

/// What the reader keeps of a hop, read from its bytes (which stay as they were sealed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hop {
    pub component: String,
    pub contract: String,
    pub contract_version: i64,
    pub decision: String,
    pub destination: String,
    pub payload_digest: Option<String>,
    pub span_id: String,
    /// The degradation marker's stage, when the hop carries one.
    pub degraded_stage: Option<String>,
}

/// Read hop `index`'s bytes: step 6 of SPEC.md section 5, at `$.chain[index]`. `text` is
/// the same bytes when they are known to be UTF-8 (the usual hop is then read in one pass).
pub fn read_hop(bytes: &[u8], text: Option<&str>, index: usize) -> Result<Hop, Refusal> {
    if let Some(hop) = text.and_then(usual_hop) {
        return Ok(hop);
    }
    let root = read_object(bytes, &HOP, &format!("$.chain[{index}]"), None)?;
    Ok(summary(&root))
}

/// The usual hop (canonical, valid, no escape) read in one pass; None for any other.
fn usual_hop(text: &str) -> Option<Hop> {
    let found: [Found<'_>; 16] = read_usual(text, &HOP)?;
    let text_at = |index: usize| match found.get(index) {
        Some(Found::Str(value)) => Some((*value).to_owned()),
        _ => None,
    };
    let degraded_stage = match found.get(5) {
        // Canonical, without escapes: no string holds `"stage":"`, so it is the member.
        Some(Found::Other(degradation)) => {
            let (_, stage) = degradation.rsplit_once("\"stage\":\"")?;
            Some(stage.strip_suffix("\"}")?.to_owned())
        }
        _ => None,
    };
    Some(Hop {
        component: text_at(0)?,
        contract: text_at(1)?,
        contract_version: match found.get(2) {
            Some(Found::Int(value)) => *value,
            _ => return None,
        },
        decision: text_at(4)?,
        destination: text_at(6)?,
        payload_digest: text_at(11),
        span_id: text_at(14)?,
        degraded_stage,
    })
}

/// The summary of a checked hop.
pub fn summary(root: &Node<'_>) -> Hop {
    let payload_digest = match member(root, "payload_digest").map(|node| &node.value) {
        Some(Value::Str(digest)) => Some(digest.to_string()),
        _ => None,
    };
    let degraded_stage = member(root, "degradation")
        .filter(|node| matches!(node.value, Value::Object(_)))
        .map(|node| string(node, "stage").to_owned());
    Hop {
        component: string(root, "component").to_owned(),
        contract: string(root, "contract").to_owned(),
        contract_version: integer(root, "contract_version"),
        decision: string(root, "decision").to_owned(),
        destination: string(root, "destination").to_owned(),
        payload_digest,
        span_id: string(root, "span_id").to_owned(),
        degraded_stage,
    }
}
