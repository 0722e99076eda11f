//! A hop (SPEC.md section 3.3) read from its sealed bytes: what a reader needs of it.

use crate::json::{Node, Value};
use crate::object::read_object;
use crate::reason::Refusal;
use crate::rules::{integer, member, string, HOP};
use crate::usual::{read_usual, Found};

/// What the reader keeps of a hop, read from its bytes (which stay as they were sealed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hop {
    pub component: Short,
    pub contract: Short,
    pub contract_version: i64,
    pub decision: Short,
    pub destination: Short,
    pub payload_digest: Option<Short>,
    pub span_id: Short,
    /// The degradation marker's stage, when the hop carries one.
    pub degraded_stage: Option<Short>,
}

/// How many bytes a `Short` holds in place.
const IN_PLACE: usize = 30;

/// A hop's member text, held in place when it is short (a component, a contract, a topic, a
/// decision, a span id usually are): reading a hop then allocates nothing for it. A longer
/// text is a `String`. The same text is always held the same way, so equality is the text's.
#[derive(Clone, PartialEq, Eq)]
pub enum Short {
    InPlace { length: u8, bytes: [u8; IN_PLACE] },
    Long(String),
}

impl Short {
    pub fn new(text: &str) -> Short {
        let mut bytes = [0u8; IN_PLACE];
        match (bytes.get_mut(..text.len()), u8::try_from(text.len())) {
            (Some(place), Ok(length)) => {
                place.copy_from_slice(text.as_bytes());
                Short::InPlace { length, bytes }
            }
            _ => Short::Long(text.to_owned()),
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            // Copied from a `str` whole: always UTF-8, so never the empty default.
            Short::InPlace { length, bytes } => bytes
                .get(..usize::from(*length))
                .and_then(|text| std::str::from_utf8(text).ok())
                .unwrap_or_default(),
            Short::Long(text) => text,
        }
    }
}

impl std::ops::Deref for Short {
    type Target = str;

    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl std::fmt::Debug for Short {
    /// As the text's own (`format!("{:?}")` writes the messages of refusals).
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.as_str(), formatter)
    }
}

impl std::fmt::Display for Short {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(self.as_str())
    }
}

impl PartialEq<str> for Short {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<String> for Short {
    fn eq(&self, other: &String) -> bool {
        self.as_str() == other
    }
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
        Some(Found::Str(value)) => Some(Short::new(value)),
        _ => None,
    };
    let degraded_stage = match found.get(5) {
        // Canonical, without escapes: no string holds `"stage":"`, so it is the member.
        Some(Found::Other(degradation)) => {
            let (_, stage) = degradation.rsplit_once("\"stage\":\"")?;
            Some(Short::new(stage.strip_suffix("\"}")?))
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
        Some(Value::Str(digest)) => Some(Short::new(digest)),
        _ => None,
    };
    let degraded_stage = member(root, "degradation")
        .filter(|node| matches!(node.value, Value::Object(_)))
        .map(|node| Short::new(string(node, "stage")));
    Hop {
        component: Short::new(string(root, "component")),
        contract: Short::new(string(root, "contract")),
        contract_version: integer(root, "contract_version"),
        decision: Short::new(string(root, "decision")),
        destination: Short::new(string(root, "destination")),
        payload_digest,
        span_id: Short::new(string(root, "span_id")),
        degraded_stage,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_text_is_its_text_held_in_place_or_not() {
        let long = "a".repeat(IN_PLACE + 1);
        for text in [
            "",
            "stage-0",
            "\u{e9}t\u{e9} \"quoted\"",
            &"b".repeat(IN_PLACE),
            &long,
        ] {
            let short = Short::new(text);
            assert_eq!(short.as_str(), text);
            assert_eq!(format!("{short:?}"), format!("{text:?}"));
            assert_eq!(short.to_string(), text);
            assert_eq!(short, Short::new(text));
            let owned: String = text.to_owned();
            assert!(short == *text && short == owned);
        }
        assert!(matches!(
            Short::new(&"b".repeat(IN_PLACE)),
            Short::InPlace { .. }
        ));
        assert!(matches!(Short::new(&long), Short::Long(_)));
        assert_ne!(Short::new("stage-0"), Short::new("stage-1"));
    }
}
