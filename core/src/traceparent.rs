//! W3C Trace Context `traceparent` values (version `00`), as SPEC.md section 1 reads them.

/// The parts of a `traceparent` value a reader needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceParent {
    pub trace_id: String,
    pub span_id: String,
    pub sampled: bool,
}

/// White space as Python's `str.strip` removes it (which holds U+001C..U+001F too).
fn is_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

fn hex_field(text: &str, length: usize) -> bool {
    text.len() == length
        && text
            .bytes()
            .all(|byte| matches!(byte, b'0'..=b'9' | b'a'..=b'f'))
}

/// Parse a value; None when it is not valid W3C Trace Context. A later version may append
/// fields (`-...`), which are ignored; version `00` has none, and `ff` is invalid.
pub fn parse(value: &str) -> Option<TraceParent> {
    let value = value.trim_matches(is_space);
    let (head, rest) = match value.get(55..) {
        Some("") => (value, None),
        Some(rest) if rest.starts_with('-') => (value.get(..55)?, Some(rest)),
        _ => return None,
    };
    // Appended fields are one line: the reference reader's pattern stops at a line feed.
    if rest.is_some_and(|rest| rest.contains('\n')) {
        return None;
    }
    let mut parts = head.split('-');
    let (Some(version), Some(trace_id), Some(span_id), Some(flags), None) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return None;
    };
    if !(hex_field(version, 2)
        && hex_field(trace_id, 32)
        && hex_field(span_id, 16)
        && hex_field(flags, 2))
    {
        return None;
    }
    if version == "ff" || (version == "00" && rest.is_some()) {
        return None;
    }
    if trace_id.bytes().all(|byte| byte == b'0') || span_id.bytes().all(|byte| byte == b'0') {
        return None;
    }
    let flags = u8::from_str_radix(flags, 16).ok()?;
    Some(TraceParent {
        trace_id: trace_id.to_owned(),
        span_id: span_id.to_owned(),
        sampled: flags & 1 == 1,
    })
}

/// A version-00 value naming a span of a trace.
pub fn format(trace_id: &str, span_id: &str, sampled: bool) -> String {
    format!(
        "00-{trace_id}-{span_id}-{}",
        if sampled { "01" } else { "00" }
    )
}

/// The value, among all `traceparent` headers, that names the envelope's trace and the last
/// hop's span (SPEC.md section 5, step 13); the others are instrumentations' own.
pub fn select<'a>(values: &[&'a str], trace_id: &str, span_id: &str) -> Option<&'a str> {
    values.iter().copied().find(|value| {
        parse(value).is_some_and(|parent| parent.trace_id == trace_id && parent.span_id == span_id)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
    const SPAN: &str = "00f067aa0ba902b7";

    #[test]
    fn reads_version_00_and_later_versions() {
        let value = format(TRACE, SPAN, true);
        assert_eq!(
            parse(&value),
            Some(TraceParent {
                trace_id: TRACE.into(),
                span_id: SPAN.into(),
                sampled: true
            })
        );
        assert!(parse(&format!(" {value}\n")).is_some());
        assert!(parse(&format!("{value}-extra")).is_none());
        assert!(parse(&format!("01{}-extra", value.get(2..).unwrap_or_default())).is_some());
        assert!(parse(&format!("ff{}", value.get(2..).unwrap_or_default())).is_none());
        assert!(parse(&format!("00-{}-{SPAN}-01", "0".repeat(32))).is_none());
        assert!(parse("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01").is_none());
    }

    #[test]
    fn selects_the_one_naming_the_last_hop() {
        let ours = format(TRACE, SPAN, true);
        let theirs = format(TRACE, "1111111111111111", true);
        assert_eq!(select(&[&theirs, &ours], TRACE, SPAN), Some(ours.as_str()));
        assert_eq!(select(&[&theirs], TRACE, SPAN), None);
    }
}
