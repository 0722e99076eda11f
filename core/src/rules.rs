//! The members of schema 2's objects and their rules (SPEC.md sections 3.2 and 3.3), and the
//! check of a parsed object against them, with the reason code and path of the first fault.
//!
//! Members are checked in the order the text gives them, each as it comes (an unknown one
//! refused where it stands); members missing are told after, the first in schema order.

use crate::json::{Member, Node, Value};
use crate::path::Path;
use crate::reason::{Reason, Refusal};
use crate::text::{is_component, is_name, is_span_id, is_timestamp, is_topic};

/// Integers are exact in every JSON implementation up to here (SPEC.md section 2).
pub const MAX_INT: i128 = (1 << 53) - 1;

/// What a string must be.
pub struct Text {
    pub min: usize,
    pub max: Option<usize>,
    pub shape: Option<fn(&str) -> bool>,
}

/// What a member's value must be.
pub enum Rule {
    Text(Text),
    Integer {
        min: i128,
    },
    Boolean,
    Word(&'static [&'static str]),
    Nullable(&'static Rule),
    List(&'static Rule),
    Object(&'static [(&'static str, Rule)]),
    /// Any JSON value: the identity's legacy chain, checked on its own.
    Any,
}

const fn text(max: usize) -> Rule {
    Rule::Text(Text {
        min: 0,
        max: Some(max),
        shape: None,
    })
}

const fn shaped(shape: fn(&str) -> bool) -> Rule {
    Rule::Text(Text {
        min: 0,
        max: None,
        shape: Some(shape),
    })
}

const NAME: Rule = Rule::Text(Text {
    min: 1,
    max: Some(200),
    shape: Some(is_name),
});
const TIMESTAMP: Rule = shaped(is_timestamp);
const SPAN_ID: Rule = shaped(is_span_id);
const TOPIC: Rule = shaped(is_topic);
const COUNT: Rule = Rule::Integer { min: 0 };
const POSITIVE: Rule = Rule::Integer { min: 1 };

pub const ERROR_TYPES: &[&str] = &[
    "malformed",
    "contract_violation",
    "transient",
    "conflict",
    "rejected_input",
    "unauthorized",
    "environment",
    "internal",
];
pub const DECISIONS: &[&str] = &[
    "originated",
    "forwarded",
    "recovered",
    "degraded",
    "rerouted",
    "rejected",
    "dead_lettered",
    "aborted",
    "redriven",
    "discarded",
];
const ATTEMPT_KINDS: &[&str] = &["first", "transport", "contract"];
const OUTCOMES: &[&str] = &["succeeded", "failed"];
const EFFECT_KINDS: &[&str] = &["record_written", "message_published", "call_accepted"];
const REASON_CODES: &[&str] = &[
    "tombstone",
    "empty_value",
    "not_utf8",
    "duplicate_header",
    "missing_header",
    "bad_json",
    "too_deep",
    "missing_field",
    "wrong_type",
    "invalid_value",
    "unknown_field",
    "unknown_error_type",
    "unknown_decision",
    "unknown_vocabulary",
    "newer_major_version",
    "payload_invalid",
    "contract_mismatch",
    "bad_traceparent",
    "bad_digest",
    "bad_signature",
    "unsigned_hop",
    "chain_rewritten",
    "hop_limit",
    "description_too_long",
    "oversize",
    "not_canonical",
    "truncated_chain",
    "payload_mismatch",
    "unexpected_writer",
    "contract_error",
    "reader_error",
    "wrong_magic_byte",
    "unknown_schema",
    "unresolvable_schema",
    "undecodable_payload",
];

const ERROR_TYPE: Rule = Rule::Word(ERROR_TYPES);

const ATTEMPT: Rule = Rule::Object(&[
    ("description", Rule::Nullable(&text(1000))),
    ("duration_ms", COUNT),
    ("error_type", Rule::Nullable(&ERROR_TYPE)),
    ("kind", Rule::Word(ATTEMPT_KINDS)),
    ("number", POSITIVE),
    ("outcome", Rule::Word(OUTCOMES)),
    ("started_at", TIMESTAMP),
]);

const EFFECT: Rule = Rule::Object(&[
    ("identifier", NAME),
    ("kind", Rule::Word(EFFECT_KINDS)),
    ("target", NAME),
]);

const ISSUE: Rule = Rule::Object(&[
    ("code", Rule::Word(REASON_CODES)),
    ("message", text(1000)),
    ("path", text(300)),
]);

const FAILURE: Rule = Rule::Object(&[
    ("attempts", Rule::List(&ATTEMPT)),
    ("component", NAME),
    ("description", text(2000)),
    ("effects", Rule::List(&EFFECT)),
    ("error_type", ERROR_TYPE),
    ("locally_resolvable", Rule::Boolean),
    ("recovery_hint", Rule::Nullable(&text(500))),
    ("run_id", Rule::Nullable(&NAME)),
    ("validation_errors", Rule::List(&ISSUE)),
    ("work_item_id", Rule::Nullable(&NAME)),
]);

const DEGRADATION: Rule = Rule::Object(&[
    ("error_type", ERROR_TYPE),
    ("reason", text(1000)),
    ("stage", NAME),
]);

const POSITION: Rule = Rule::Object(&[("offset", COUNT), ("partition", COUNT), ("topic", TOPIC)]);

/// A hop (SPEC.md section 3.3); members in canonical order.
pub const HOP: Rule = Rule::Object(&[
    ("component", shaped(is_component)),
    ("contract", NAME),
    ("contract_version", POSITIVE),
    ("decided_at", TIMESTAMP),
    ("decision", Rule::Word(DECISIONS)),
    ("degradation", Rule::Nullable(&DEGRADATION)),
    ("destination", TOPIC),
    ("effects", Rule::List(&EFFECT)),
    ("failure", Rule::Nullable(&FAILURE)),
    ("instance", NAME),
    ("observation", text(1000)),
    (
        "payload_digest",
        Rule::Nullable(&shaped(crate::text::is_digest)),
    ),
    ("received_at", Rule::Nullable(&TIMESTAMP)),
    ("received_from", Rule::Nullable(&POSITION)),
    ("span_id", SPAN_ID),
    ("tries", Rule::List(&ATTEMPT)),
]);

/// The identity (SPEC.md section 3.2); members in canonical order.
pub const IDENTITY: Rule = Rule::Object(&[
    ("contract", NAME),
    ("contract_version", POSITIVE),
    ("id", shaped(crate::text::is_envelope_id)),
    ("intent_key", NAME),
    ("legacy", Rule::Any),
    ("origin_span_id", SPAN_ID),
    ("run_id", NAME),
    ("schema_version", shaped(crate::text::is_schema_version)),
    ("trace_id", shaped(crate::text::is_trace_id)),
    ("work_item_id", NAME),
]);

/// Check a value against its rule; `name` is the member it is (the last part of its path).
pub fn check(rule: &Rule, node: &Node<'_>, path: &Path<'_>, name: &str) -> Result<(), Refusal> {
    let wrong = |expected: &str| {
        Err(Refusal::new(
            Reason::WrongType,
            path.render(),
            format!("expected {expected}, got {}", kind_of(&node.value)),
        ))
    };
    match (rule, &node.value) {
        (Rule::Any, _) => Ok(()),
        (Rule::Nullable(_), Value::Null) => Ok(()),
        (Rule::Nullable(inner), _) => check(inner, node, path, name),
        (Rule::Boolean, Value::Bool(_)) => Ok(()),
        (Rule::Boolean, _) => wrong("a boolean"),
        (Rule::Integer { min }, Value::Int(value)) => {
            if *value < *min || *value > MAX_INT {
                Err(Refusal::new(
                    Reason::InvalidValue,
                    path.render(),
                    format!("an integer from {min} to 2**53 - 1"),
                ))
            } else {
                Ok(())
            }
        }
        (Rule::Integer { .. }, _) => wrong("an integer"),
        (Rule::Word(words), Value::Str(word)) => {
            if words.contains(&word.as_ref()) {
                Ok(())
            } else {
                let reason = match name {
                    "error_type" => Reason::UnknownErrorType,
                    "decision" => Reason::UnknownDecision,
                    _ => Reason::UnknownVocabulary,
                };
                Err(Refusal::new(
                    reason,
                    path.render(),
                    format!("{word:?} is not a word of this vocabulary"),
                ))
            }
        }
        (Rule::Word(_), _) => wrong("a string"),
        (Rule::Text(rules), Value::Str(value)) => check_text(rules, value, path, name),
        (Rule::Text(_), _) => wrong("a string"),
        (Rule::List(item), Value::Array(items)) => {
            for (index, element) in items.iter().enumerate() {
                check(item, element, &Path::Index(path, index), name)?;
            }
            Ok(())
        }
        (Rule::List(_), _) => wrong("an array"),
        (Rule::Object(members), Value::Object(given)) => check_object(members, given, path),
        (Rule::Object(_), _) => wrong("an object"),
    }
}

fn check_text(rules: &Text, value: &str, path: &Path<'_>, name: &str) -> Result<(), Refusal> {
    let length = if value.is_ascii() {
        value.len()
    } else {
        value.chars().count()
    };
    if length < rules.min {
        return Err(Refusal::new(
            Reason::InvalidValue,
            path.render(),
            format!("at least {} characters", rules.min),
        ));
    }
    if let Some(max) = rules.max {
        if length > max {
            let reason = if name == "description" {
                Reason::DescriptionTooLong
            } else {
                Reason::InvalidValue
            };
            return Err(Refusal::new(
                reason,
                path.render(),
                format!("at most {max} characters, not {length}"),
            ));
        }
    }
    if let Some(shape) = rules.shape {
        if !shape(value) {
            return Err(Refusal::new(
                Reason::InvalidValue,
                path.render(),
                "not of the form its member requires",
            ));
        }
    }
    Ok(())
}

fn check_object(
    members: &[(&'static str, Rule)],
    given: &[Member<'_>],
    path: &Path<'_>,
) -> Result<(), Refusal> {
    for member in given {
        let Some((_, rule)) = members.iter().find(|(name, _)| *name == member.name) else {
            return Err(Refusal::new(
                Reason::UnknownField,
                path.render(),
                format!("unknown member {:?}", member.name),
            ));
        };
        check(
            rule,
            &member.node,
            &Path::Member(path, &member.name),
            &member.name,
        )?;
    }
    for (name, _) in members {
        if !given.iter().any(|member| member.name == *name) {
            return Err(Refusal::new(
                Reason::MissingField,
                path.render(),
                format!("member {name:?} is missing"),
            ));
        }
    }
    Ok(())
}

fn kind_of(value: &Value<'_>) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Int(_) => "an integer",
        Value::Float => "a number with a fraction or an exponent",
        Value::Str(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A member of a checked object (None when absent, which a checked object never is).
pub fn member<'a, 'b>(node: &'a Node<'b>, name: &str) -> Option<&'a Node<'b>> {
    match &node.value {
        Value::Object(members) => members
            .iter()
            .find(|member| member.name == name)
            .map(|member| &member.node),
        _ => None,
    }
}

/// A string member of a checked object ("" when absent or not a string).
pub fn string<'a>(node: &'a Node<'_>, name: &str) -> &'a str {
    match member(node, name).map(|node| &node.value) {
        Some(Value::Str(value)) => value,
        _ => "",
    }
}

/// An integer member of a checked object (0 when absent or not an integer).
pub fn integer(node: &Node<'_>, name: &str) -> i64 {
    match member(node, name).map(|node| &node.value) {
        Some(Value::Int(value)) => i64::try_from(*value).unwrap_or_default(),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::parse;

    fn refusal(text: &str) -> Option<(Reason, String)> {
        let parsed = parse(text.as_bytes()).ok()?;
        check(&DEGRADATION, &parsed.root, &Path::Root("$"), "")
            .err()
            .map(|refusal| (refusal.reason, refusal.path))
    }

    #[test]
    fn refuses_the_first_fault_in_text_order() {
        let ok = r#"{"error_type":"transient","reason":"r","stage":"s"}"#;
        assert_eq!(refusal(ok), None);
        assert_eq!(
            refusal(r#"{"error_type":"nope","x":1,"stage":"s"}"#),
            Some((Reason::UnknownErrorType, "$.error_type".into()))
        );
        assert_eq!(
            refusal(r#"{"x":1,"error_type":"nope"}"#),
            Some((Reason::UnknownField, "$".into()))
        );
        assert_eq!(
            refusal(r#"{"error_type":"transient","stage":""}"#),
            Some((Reason::InvalidValue, "$.stage".into()))
        );
        assert_eq!(
            refusal(r#"{"error_type":"transient","stage":"s"}"#),
            Some((Reason::MissingField, "$".into()))
        );
        assert_eq!(
            refusal(r#"{"error_type":1}"#),
            Some((Reason::WrongType, "$.error_type".into()))
        );
    }
}
