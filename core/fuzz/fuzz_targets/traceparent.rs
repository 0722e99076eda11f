//! The `traceparent` reader (W3C Trace Context, SPEC.md section 1): a value reads as a trace
//! and a span, which write back as a value that reads the same, or it is refused.
//!
//! Input: the value's bytes (read as UTF-8, invalid sequences replaced).
#![no_main]

use hopchain_core::traceparent::{format, parse, select};
use libfuzzer_sys::fuzz_target;

fn lowercase_hex(text: &str, length: usize) -> bool {
    text.len() == length
        && text
            .bytes()
            .all(|byte| matches!(byte, b'0'..=b'9' | b'a'..=b'f'))
        && text.bytes().any(|byte| byte != b'0')
}

fuzz_target!(|data: &[u8]| {
    let value = String::from_utf8_lossy(data);
    let Some(parent) = parse(&value) else {
        return;
    };
    assert!(lowercase_hex(&parent.trace_id, 32), "{parent:?}");
    assert!(lowercase_hex(&parent.span_id, 16), "{parent:?}");
    let written = format(&parent.trace_id, &parent.span_id, parent.sampled);
    assert_eq!(parse(&written).as_ref(), Some(&parent));
    let values = [written.as_str(), &value];
    assert_eq!(
        select(&values, &parent.trace_id, &parent.span_id),
        Some(written.as_str())
    );
    assert_eq!(
        select(&[&value], &parent.trace_id, &parent.span_id),
        Some(value.as_ref())
    );
});
