//! A hop (SPEC.md section 3.3) read from its sealed bytes: what a reader needs of it.

use crate::json::{Node, Value};
use crate::object::read_object;
use crate::reason::Refusal;
use crate::rules::{integer, member, string, HOP};

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

/// Read hop `index`'s bytes: step 6 of SPEC.md section 5, at `$.chain[index]`.
pub fn read_hop(bytes: &[u8], index: usize) -> Result<Hop, Refusal> {
    let root = read_object(bytes, &HOP, &format!("$.chain[{index}]"), None)?;
    Ok(summary(&root))
}

/// The summary of a checked hop.
pub fn summary(root: &Node) -> Hop {
    let payload_digest = match member(root, "payload_digest").map(|node| &node.value) {
        Some(Value::Str(digest)) => Some(digest.clone()),
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
