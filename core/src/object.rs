//! One canonical object of schema 2 read from its bytes: SPEC.md section 5, step 3 (the
//! identity) and step 6 (each hop), with the reason code of the first fault.

use crate::canonical::is_canonical;
use crate::json::{nesting, parse, Node};
use crate::path::Path;
use crate::reason::{Reason, Refusal};
use crate::rules::{check, Rule};

/// Arrays and objects nested deeper than this are refused (`too_deep`).
pub const MAX_DEPTH: i64 = 64;

/// Read `raw` as one object of `rule`, at `path`; the member `raw_member` is kept as written
/// (the identity's legacy chain) and is no part of this object's canonical check.
///
/// In order: nesting (`too_deep`), JSON (`bad_json`: not JSON, `NaN`, a duplicate member, a
/// lone surrogate), the rules (their own codes), and canonical form (`not_canonical`).
pub fn read_object<'a>(
    raw: &'a [u8],
    rule: &Rule,
    path: &str,
    raw_member: Option<&str>,
) -> Result<Node<'a>, Refusal> {
    let too_deep = || {
        Refusal::new(
            Reason::TooDeep,
            path,
            format!("JSON nested more than {MAX_DEPTH} levels deep"),
        )
    };
    // Nesting is told first. In JSON the brackets outside strings are the nesting the parser
    // met; only a text that is not JSON needs them counted on their own.
    let parsed = match parse(raw) {
        Ok(parsed) if i64::try_from(parsed.depth).unwrap_or(i64::MAX) > MAX_DEPTH => {
            return Err(too_deep())
        }
        Ok(parsed) => parsed,
        Err(_) if nesting(raw) > MAX_DEPTH => return Err(too_deep()),
        Err(_) => return Err(Refusal::new(Reason::BadJson, path, "not JSON")),
    };
    if parsed.duplicate {
        return Err(Refusal::new(
            Reason::BadJson,
            path,
            "a member appears twice: which one counts is ambiguous",
        ));
    }
    if parsed.lone_surrogate {
        return Err(Refusal::new(
            Reason::BadJson,
            path,
            "a string holds a lone UTF-16 surrogate: it has no UTF-8 form (RFC 7493, RFC 8785)",
        ));
    }
    check(rule, &parsed.root, &Path::Root(path), "")?;
    if !is_canonical(&parsed.root, raw, raw_member) {
        return Err(Refusal::new(
            Reason::NotCanonical,
            path,
            "not in its canonical form (RFC 8785: sorted members, no white space)",
        ));
    }
    Ok(parsed.root)
}
