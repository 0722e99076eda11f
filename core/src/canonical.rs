//! RFC 8785 text of a checked value: members sorted, no white space (SPEC.md section 2).
//!
//! Only values that passed their rules are written here, so every number is an integer
//! within 2^53 - 1 and every member name is ASCII: sorting by bytes is RFC 8785's order.

use crate::json::{Node, Value};
use crate::text::write_string;

/// Write `node` canonically; a member of the top object named `raw` is written as it was read.
pub fn write(out: &mut Vec<u8>, node: &Node<'_>, source: &[u8], raw: Option<&str>) {
    match &node.value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Int(value) => out.extend_from_slice(value.to_string().as_bytes()),
        // Never in a checked value; written so that it can never compare equal.
        Value::Float => out.extend_from_slice(b"\x00"),
        Value::Str(text) => write_string(out, text),
        Value::Array(items) => {
            out.push(b'[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(b',');
                }
                write(out, item, source, None);
            }
            out.push(b']');
        }
        Value::Object(members) => {
            let mut sorted: Vec<_> = members.iter().collect();
            sorted.sort_by(|a, b| a.name.as_bytes().cmp(b.name.as_bytes()));
            out.push(b'{');
            for (index, member) in sorted.into_iter().enumerate() {
                if index > 0 {
                    out.push(b',');
                }
                write_string(out, &member.name);
                out.push(b':');
                if raw == Some(member.name.as_ref()) {
                    out.extend_from_slice(source.get(member.node.span.clone()).unwrap_or_default());
                } else {
                    write(out, &member.node, source, None);
                }
            }
            out.push(b'}');
        }
    }
}

/// Whether `source` is exactly the canonical text of the value read from it.
pub fn is_canonical(node: &Node<'_>, source: &[u8], raw: Option<&str>) -> bool {
    let mut out = Vec::with_capacity(source.len());
    write(&mut out, node, source, raw);
    out == source
}
