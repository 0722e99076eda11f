//! The shapes of schema 2's strings (SPEC.md sections 2, 3.2 and 3.3), and canonical text.

fn is_lower_hex(text: &str) -> bool {
    text.bytes()
        .all(|byte| matches!(byte, b'0'..=b'9' | b'a'..=b'f'))
}

/// A hop's or an identity's name: 1 character at least, no control character.
pub fn is_name(text: &str) -> bool {
    // U+0000 to U+001F and U+007F are one byte each in UTF-8, and no byte of a longer
    // character is below 0x80: looking at bytes finds them without decoding characters.
    !text.is_empty() && !text.bytes().any(|byte| byte <= 0x1f || byte == 0x7f)
}

/// `[A-Za-z0-9][A-Za-z0-9._-]{0,127}`: ASCII only, so no look-alike names.
pub fn is_component(text: &str) -> bool {
    let bytes = text.as_bytes();
    matches!(bytes.first(), Some(first) if first.is_ascii_alphanumeric())
        && bytes.len() <= 128
        && bytes
            .iter()
            .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b'-'))
}

/// A Kafka topic's name: `[A-Za-z0-9._-]{1,249}`.
pub fn is_topic(text: &str) -> bool {
    (1..=249).contains(&text.len())
        && text
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b'-'))
}

/// 16 lower-case hex digits, not all zero.
pub fn is_span_id(text: &str) -> bool {
    text.len() == 16 && is_lower_hex(text) && text.bytes().any(|byte| byte != b'0')
}

/// 32 lower-case hex digits, not all zero.
pub fn is_trace_id(text: &str) -> bool {
    text.len() == 32 && is_lower_hex(text) && text.bytes().any(|byte| byte != b'0')
}

/// A SHA-256 digest: 64 lower-case hex digits.
pub fn is_digest(text: &str) -> bool {
    text.len() == 64 && is_lower_hex(text)
}

/// 26 characters of Crockford base 32, upper case.
pub fn is_envelope_id(text: &str) -> bool {
    text.len() == 26
        && text.bytes().all(|byte| {
            matches!(byte, b'0'..=b'9' | b'A'..=b'H' | b'J' | b'K' | b'M' | b'N' | b'P'..=b'T' | b'V'..=b'Z')
        })
}

/// `2.` and a minor version: `2.0`, `2.1` ... `2.9999`.
pub fn is_schema_version(text: &str) -> bool {
    let Some(minor) = text.strip_prefix("2.") else {
        return false;
    };
    minor == "0"
        || (!minor.starts_with('0')
            && (1..=4).contains(&minor.len())
            && minor.bytes().all(|byte| byte.is_ascii_digit()))
}

fn number(bytes: &[u8]) -> Option<u32> {
    bytes.iter().try_fold(0u32, |value, &byte| {
        byte.is_ascii_digit()
            .then(|| value * 10 + u32::from(byte - b'0'))
    })
}

fn is_leap(year: u32) -> bool {
    year.is_multiple_of(4) && (!year.is_multiple_of(100) || year.is_multiple_of(400))
}

/// UTC in one spelling: `YYYY-MM-DDTHH:MM:SSZ`, or with `.ffffff` (six digits, not all zero),
/// on a day the proleptic Gregorian calendar has (year 0000 excluded).
pub fn is_timestamp(text: &str) -> bool {
    let bytes = text.as_bytes();
    let fraction = match bytes.len() {
        20 => None,
        27 => bytes.get(19..26),
        _ => return false,
    };
    let separators = [(4, b'-'), (7, b'-'), (10, b'T'), (13, b':'), (16, b':')];
    if separators
        .iter()
        .any(|&(at, separator)| bytes.get(at) != Some(&separator))
        || bytes.last() != Some(&b'Z')
    {
        return false;
    }
    if let Some(fraction) = fraction {
        match fraction.split_first() {
            Some((b'.', digits)) if number(digits).is_some_and(|value| value != 0) => {}
            _ => return false,
        }
    }
    let field = |range: std::ops::Range<usize>| bytes.get(range).and_then(number);
    let (Some(year), Some(month), Some(day), Some(hour), Some(minute), Some(second)) = (
        field(0..4),
        field(5..7),
        field(8..10),
        field(11..13),
        field(14..16),
        field(17..19),
    ) else {
        return false;
    };
    let days = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if is_leap(year) => 29,
        2 => 28,
        _ => return false,
    };
    year >= 1 && (1..=days).contains(&day) && hour < 24 && minute < 60 && second < 60
}

/// Write a string as RFC 8785 does: `"` and `\` escaped, control characters as `\b \t \n \f
/// \r` or `\u00xx` in lower case, every other character as itself.
pub fn write_string(out: &mut Vec<u8>, text: &str) {
    out.push(b'"');
    let bytes = text.as_bytes();
    // The usual string has nothing to escape: written at once.
    if memchr::memchr2(b'"', b'\\', bytes).is_none() && bytes.iter().all(|&byte| byte >= 0x20) {
        out.extend_from_slice(bytes);
        out.push(b'"');
        return;
    }
    let mut plain = 0;
    for (at, &byte) in bytes.iter().enumerate() {
        let escape: &[u8] = match byte {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            0x08 => b"\\b",
            b'\t' => b"\\t",
            b'\n' => b"\\n",
            0x0c => b"\\f",
            b'\r' => b"\\r",
            0x00..=0x1f => b"",
            _ => continue,
        };
        out.extend_from_slice(bytes.get(plain..at).unwrap_or_default());
        if escape.is_empty() {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.extend_from_slice(b"\\u00");
            out.push(HEX.get(usize::from(byte >> 4)).copied().unwrap_or(b'0'));
            out.push(HEX.get(usize::from(byte & 0xf)).copied().unwrap_or(b'0'));
        } else {
            out.extend_from_slice(escape);
        }
        plain = at + 1;
    }
    out.extend_from_slice(bytes.get(plain..).unwrap_or_default());
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_have_one_spelling_on_real_days() {
        assert!(is_timestamp("2026-03-01T09:30:00Z"));
        assert!(is_timestamp("2024-02-29T23:59:59.000001Z"));
        assert!(is_timestamp("2000-02-29T00:00:00Z"));
        assert!(!is_timestamp("1900-02-29T00:00:00Z"));
        assert!(!is_timestamp("2026-04-31T00:00:00Z"));
        assert!(!is_timestamp("0000-01-01T00:00:00Z"));
        assert!(!is_timestamp("2026-03-01T09:30:00.000000Z"));
        assert!(!is_timestamp("2026-03-01T09:30:00.123Z"));
        assert!(!is_timestamp("2026-03-01T09:30:00+00:00"));
        assert!(!is_timestamp("2026-03-01T24:00:00Z"));
        assert!(!is_timestamp("2026-03-01t09:30:00Z"));
    }

    #[test]
    fn names_and_ids() {
        assert!(is_component("ingest-1.a_b"));
        assert!(!is_component("-ingest"));
        assert!(!is_component("ingеst")); // a Cyrillic е
        assert!(is_schema_version("2.0"));
        assert!(is_schema_version("2.10"));
        assert!(!is_schema_version("2.01"));
        assert!(!is_schema_version("3.0"));
        assert!(!is_span_id("0000000000000000"));
        assert!(is_envelope_id("01HV5Z8Q9W3K7C4M2N6P8R0T1X"));
        assert!(!is_envelope_id("01HV5Z8Q9W3K7C4M2N6P8R0T1U"));
        assert!(is_name("a b"));
        assert!(!is_name("a\u{7f}"));
    }

    #[test]
    fn strings_are_written_as_rfc_8785_writes_them() {
        let mut out = Vec::new();
        write_string(
            &mut out,
            "a\"\\\u{8}\t\n\u{c}\r\u{1}\u{1f}\u{7f}é\u{2028}😀/",
        );
        assert_eq!(
            String::from_utf8(out).ok().as_deref(),
            Some("\"a\\\"\\\\\\b\\t\\n\\f\\r\\u0001\\u001f\u{7f}é\u{2028}😀/\"")
        );
    }
}
