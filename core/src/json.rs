//! A JSON reader that keeps what canonical form and the reason codes need to know.
//!
//! It reads as Python's `json.loads` does (the reference reader's parser), so that both refuse
//! the same texts: strict RFC 8259 plus the words `NaN`, `Infinity` and `-Infinity`, which it
//! reports apart. Strings are decoded; a lone UTF-16 surrogate is noted, not refused, since
//! only some readers refuse it. Every value keeps its byte range (a legacy chain is kept raw).

use std::borrow::Cow;
use std::ops::Range;

/// Nesting at which the parser gives up: far beyond SPEC.md's 64 levels, so that a text within
/// them is always read, and the stack stays small whatever the input.
pub const PARSER_DEPTH: usize = 1000;

/// A JSON value as read; strings without escapes are borrowed from the text.
#[derive(Clone, Debug, PartialEq)]
pub enum Value<'a> {
    Null,
    Bool(bool),
    /// An integer (no fraction, no exponent), clamped to the range of `i128`.
    Int(i128),
    /// A number with a fraction or an exponent: never a valid member of an envelope.
    Float,
    Str(Cow<'a, str>),
    Array(Vec<Node<'a>>),
    Object(Vec<Member<'a>>),
}

/// A value and where its text is.
#[derive(Clone, Debug, PartialEq)]
pub struct Node<'a> {
    pub value: Value<'a>,
    pub span: Range<usize>,
}

/// An object's member.
#[derive(Clone, Debug, PartialEq)]
pub struct Member<'a> {
    pub name: Cow<'a, str>,
    pub node: Node<'a>,
}

/// Why a text is not JSON.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// `NaN`, `Infinity` or `-Infinity`, where a value was due.
    NonFinite,
    /// Anything else that is not JSON (the parser's own depth limit included).
    Syntax,
}

/// A parsed text, with what a strict reader refuses although the grammar admits it.
#[derive(Clone, Debug)]
pub struct Parsed<'a> {
    pub root: Node<'a>,
    /// Some object holds a member name twice.
    pub duplicate: bool,
    /// Some string or member name holds a lone surrogate (`\ud800` without its pair).
    pub lone_surrogate: bool,
    /// How deeply arrays and objects nest (a scalar: 0).
    pub depth: usize,
}

/// Parse a whole text (white space around the value allowed, nothing else).
pub fn parse(text: &[u8]) -> Result<Parsed<'_>, Fault> {
    // Checked once here, so that strings are borrowed without checking each again.
    let source = std::str::from_utf8(text).map_err(|_| Fault::Syntax)?;
    let mut parser = Parser {
        text,
        source,
        at: 0,
        duplicate: false,
        lone_surrogate: false,
        deepest: 0,
    };
    parser.space();
    let root = parser.value(0)?;
    parser.space();
    if parser.at != text.len() {
        return Err(Fault::Syntax);
    }
    Ok(Parsed {
        root,
        duplicate: parser.duplicate,
        lone_surrogate: parser.lone_surrogate,
        depth: parser.deepest,
    })
}

struct Parser<'a> {
    text: &'a [u8],
    /// The same text, known to be UTF-8.
    source: &'a str,
    at: usize,
    duplicate: bool,
    lone_surrogate: bool,
    deepest: usize,
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<u8> {
        self.text.get(self.at).copied()
    }

    fn rest(&self) -> &'a [u8] {
        self.text.get(self.at..).unwrap_or_default()
    }

    fn space(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }

    fn value(&mut self, depth: usize) -> Result<Node<'a>, Fault> {
        let start = self.at;
        let value = match self.peek() {
            Some(b'{') => self.object(depth)?,
            Some(b'[') => self.array(depth)?,
            Some(b'"') => Value::Str(self.string()?),
            Some(b't') => self.word(b"true", Value::Bool(true))?,
            Some(b'f') => self.word(b"false", Value::Bool(false))?,
            Some(b'n') => self.word(b"null", Value::Null)?,
            Some(b'N') if self.rest().starts_with(b"NaN") => return Err(Fault::NonFinite),
            Some(b'I') if self.rest().starts_with(b"Infinity") => return Err(Fault::NonFinite),
            Some(b'-') if self.rest().starts_with(b"-Infinity") => return Err(Fault::NonFinite),
            Some(b'-' | b'0'..=b'9') => self.number()?,
            _ => return Err(Fault::Syntax),
        };
        Ok(Node {
            value,
            span: start..self.at,
        })
    }

    fn word(&mut self, word: &[u8], value: Value<'a>) -> Result<Value<'a>, Fault> {
        if self.rest().starts_with(word) {
            self.at += word.len();
            Ok(value)
        } else {
            Err(Fault::Syntax)
        }
    }

    fn object(&mut self, depth: usize) -> Result<Value<'a>, Fault> {
        if depth >= PARSER_DEPTH {
            return Err(Fault::Syntax);
        }
        self.deepest = self.deepest.max(depth + 1);
        self.at += 1;
        let mut members: Vec<Member<'a>> = Vec::new();
        self.space();
        if self.peek() == Some(b'}') {
            self.at += 1;
            return Ok(Value::Object(members));
        }
        loop {
            self.space();
            if self.peek() != Some(b'"') {
                return Err(Fault::Syntax);
            }
            let name = self.string()?;
            self.space();
            if self.peek() != Some(b':') {
                return Err(Fault::Syntax);
            }
            self.at += 1;
            self.space();
            let node = self.value(depth + 1)?;
            members.push(Member { name, node });
            self.space();
            match self.peek() {
                Some(b',') => self.at += 1,
                Some(b'}') => {
                    self.at += 1;
                    self.duplicate |= has_duplicate(&members);
                    return Ok(Value::Object(members));
                }
                _ => return Err(Fault::Syntax),
            }
        }
    }

    fn array(&mut self, depth: usize) -> Result<Value<'a>, Fault> {
        if depth >= PARSER_DEPTH {
            return Err(Fault::Syntax);
        }
        self.deepest = self.deepest.max(depth + 1);
        self.at += 1;
        let mut items = Vec::new();
        self.space();
        if self.peek() == Some(b']') {
            self.at += 1;
            return Ok(Value::Array(items));
        }
        loop {
            self.space();
            items.push(self.value(depth + 1)?);
            self.space();
            match self.peek() {
                Some(b',') => self.at += 1,
                Some(b']') => {
                    self.at += 1;
                    return Ok(Value::Array(items));
                }
                _ => return Err(Fault::Syntax),
            }
        }
    }

    fn digits(&mut self) -> usize {
        let start = self.at;
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.at += 1;
        }
        self.at - start
    }

    fn number(&mut self) -> Result<Value<'a>, Fault> {
        let negative = self.peek() == Some(b'-');
        if negative {
            self.at += 1;
        }
        let first = self.at;
        match self.peek() {
            Some(b'0') => self.at += 1,
            Some(b'1'..=b'9') => {
                self.digits();
            }
            _ => return Err(Fault::Syntax),
        }
        let integer_end = self.at;
        let mut float = false;
        // A fraction or an exponent makes it a float; a "." or "e" without digits ends the
        // number there, and what follows is refused by the caller, as Python's scanner does.
        if self.peek() == Some(b'.') && matches!(self.text.get(self.at + 1), Some(b'0'..=b'9')) {
            self.at += 1;
            self.digits();
            float = true;
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            let mark = self.at;
            self.at += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.at += 1;
            }
            if self.digits() == 0 {
                self.at = mark;
            } else {
                float = true;
            }
        }
        if float {
            return Ok(Value::Float);
        }
        let mut value: i128 = 0;
        for &digit in self.text.get(first..integer_end).unwrap_or_default() {
            value = value
                .saturating_mul(10)
                .saturating_add(i128::from(digit - b'0'));
        }
        Ok(Value::Int(if negative { -value } else { value }))
    }

    fn hex4(&self, at: usize) -> Option<u32> {
        let digits = self.text.get(at..at + 4)?;
        let mut unit = 0u32;
        for &digit in digits {
            unit = unit * 16 + char::from(digit).to_digit(16)?;
        }
        Some(unit)
    }

    fn string(&mut self) -> Result<Cow<'a, str>, Fault> {
        self.at += 1;
        // The usual string has no escape: it is borrowed from the text.
        let rest = self.rest();
        let run = memchr::memchr2(b'"', b'\\', rest).ok_or(Fault::Syntax)?;
        let plain = rest.get(..run).unwrap_or_default();
        if rest.get(run) == Some(&b'"') && !plain.iter().any(|&byte| byte < 0x20) {
            // Both ends are ASCII (a quote each), so the slice is whole characters.
            let borrowed = self
                .source
                .get(self.at..self.at + run)
                .ok_or(Fault::Syntax)?;
            self.at += run + 1;
            return Ok(Cow::Borrowed(borrowed));
        }
        let mut out: Vec<u8> = Vec::new();
        loop {
            let rest = self.rest();
            // Copy the run of plain bytes at once.
            let run = rest
                .iter()
                .position(|&byte| byte == b'"' || byte == b'\\' || byte < 0x20)
                .ok_or(Fault::Syntax)?;
            out.extend_from_slice(rest.get(..run).unwrap_or_default());
            self.at += run;
            match self.peek() {
                Some(b'"') => {
                    self.at += 1;
                    // The input was checked to be UTF-8 and escapes write UTF-8.
                    return String::from_utf8(out)
                        .map(Cow::Owned)
                        .map_err(|_| Fault::Syntax);
                }
                Some(b'\\') => self.escape(&mut out)?,
                _ => return Err(Fault::Syntax), // a raw control character
            }
        }
    }

    fn escape(&mut self, out: &mut Vec<u8>) -> Result<(), Fault> {
        let simple = match self.text.get(self.at + 1) {
            Some(b'"') => Some('"'),
            Some(b'\\') => Some('\\'),
            Some(b'/') => Some('/'),
            Some(b'b') => Some('\u{8}'),
            Some(b'f') => Some('\u{c}'),
            Some(b'n') => Some('\n'),
            Some(b'r') => Some('\r'),
            Some(b't') => Some('\t'),
            Some(b'u') => None,
            _ => return Err(Fault::Syntax),
        };
        if let Some(c) = simple {
            push_char(out, c);
            self.at += 2;
            return Ok(());
        }
        let unit = self.hex4(self.at + 2).ok_or(Fault::Syntax)?;
        self.at += 6;
        if (0xd800..0xdc00).contains(&unit) {
            // A high surrogate is a character only with the low one that follows it.
            if self.text.get(self.at..self.at + 2) == Some(b"\\u") {
                if let Some(low) = self.hex4(self.at + 2) {
                    if (0xdc00..0xe000).contains(&low) {
                        self.at += 6;
                        let code = 0x10000 + ((unit - 0xd800) << 10) + (low - 0xdc00);
                        push_char(out, char::from_u32(code).unwrap_or('\u{fffd}'));
                        return Ok(());
                    }
                }
            }
            self.lone_surrogate = true;
            push_char(out, '\u{fffd}');
        } else if (0xdc00..0xe000).contains(&unit) {
            self.lone_surrogate = true;
            push_char(out, '\u{fffd}');
        } else {
            push_char(out, char::from_u32(unit).unwrap_or('\u{fffd}'));
        }
        Ok(())
    }
}

/// Whether an object names a member twice (sorted once when it has many: one pass stays
/// near linear whatever the text).
pub(crate) fn has_duplicate(members: &[Member<'_>]) -> bool {
    if members.len() <= 16 {
        return members.iter().enumerate().any(|(index, member)| {
            members
                .get(index + 1..)
                .unwrap_or_default()
                .iter()
                .any(|other| other.name == member.name)
        });
    }
    let mut names: Vec<&str> = members.iter().map(|member| member.name.as_ref()).collect();
    names.sort_unstable();
    names.windows(2).any(|pair| pair.first() == pair.get(1))
}

fn push_char(out: &mut Vec<u8>, c: char) {
    let mut buffer = [0u8; 4];
    out.extend_from_slice(c.encode_utf8(&mut buffer).as_bytes());
}

/// Whether some object in a value names a member twice (a value built, not parsed).
pub fn holds_duplicate(node: &Node<'_>) -> bool {
    match &node.value {
        Value::Object(members) => {
            has_duplicate(members) || members.iter().any(|member| holds_duplicate(&member.node))
        }
        Value::Array(items) => items.iter().any(holds_duplicate),
        _ => false,
    }
}

/// How deeply arrays and objects nest, counted as the reference reader counts: brackets
/// outside of string literals, a literal being `"` up to the next unescaped `"` (an escape
/// is a backslash and any byte but a line feed); a `"` that opens no literal is skipped.
pub fn nesting(text: &[u8]) -> i64 {
    let mut depth: i64 = 0;
    let mut deepest: i64 = 0;
    let mut at = 0;
    while let Some(&byte) = text.get(at) {
        match byte {
            b'"' => {
                at = match literal_end(text, at) {
                    Some(end) => end,
                    None => at + 1,
                };
                continue;
            }
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth -= 1,
            _ => {}
        }
        at += 1;
    }
    deepest
}

/// Where a string literal that opens at `start` ends (just past its closing `"`).
fn literal_end(text: &[u8], start: usize) -> Option<usize> {
    let mut at = start + 1;
    loop {
        match text.get(at)? {
            b'"' => return Some(at + 1),
            b'\\' => match text.get(at + 1)? {
                b'\n' => return None,
                _ => at += 2,
            },
            _ => at += 1,
        }
    }
}

/// Whether a text uses `NaN` or `Infinity` as a value, read the way the reference reader's
/// check reads it: the words are looked for only in what parses up to them.
pub fn uses_non_finite(text: &[u8]) -> bool {
    if memchr::memchr2(b'N', b'I', text).is_none() {
        return false;
    }
    matches!(parse(text), Err(Fault::NonFinite))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_values_and_their_spans() {
        let text = br#" {"a": [1, -2, 1.0, "x\u00e9"], "b": null} "#;
        let Ok(parsed) = parse(text) else {
            unreachable!("valid JSON")
        };
        assert_eq!(parsed.root.span, 1..text.len() - 1);
        let Value::Object(members) = &parsed.root.value else {
            unreachable!("an object")
        };
        let items = members.first().map(|member| &member.node.value);
        let Some(Value::Array(items)) = items else {
            unreachable!("an array")
        };
        let values: Vec<&Value> = items.iter().map(|item| &item.value).collect();
        assert_eq!(
            values,
            vec![
                &Value::Int(1),
                &Value::Int(-2),
                &Value::Float,
                &Value::Str("xé".into())
            ]
        );
        assert!(!parsed.duplicate);
    }

    #[test]
    fn tells_non_finite_words_from_other_faults() {
        assert_eq!(parse(b"[1, NaN]").err(), Some(Fault::NonFinite));
        assert_eq!(parse(b"[-Infinity]").err(), Some(Fault::NonFinite));
        assert_eq!(parse(b"[1,, NaN]").err(), Some(Fault::Syntax));
        assert_eq!(parse(b"{\"a\": 1} x").err(), Some(Fault::Syntax));
        assert!(uses_non_finite(b"{\"a\": NaN}"));
        assert!(!uses_non_finite(b"{\"a\": \"NaN\"}"));
    }

    #[test]
    fn notes_duplicates_and_lone_surrogates() {
        let Ok(parsed) = parse(br#"{"a":1,"a":2}"#) else {
            unreachable!("valid JSON")
        };
        assert!(parsed.duplicate);
        let Ok(parsed) = parse(br#"["\ud83d\ude00", "\ud800"]"#) else {
            unreachable!("valid JSON")
        };
        assert!(parsed.lone_surrogate);
        let Ok(parsed) = parse(br#"["\ud83d\ude00"]"#) else {
            unreachable!("valid JSON")
        };
        assert!(!parsed.lone_surrogate);
    }

    #[test]
    fn counts_nesting_outside_strings() {
        assert_eq!(nesting(br#"{"a":["[[[", {"b": []}]}"#), 4);
        assert_eq!(nesting(b"]]][["), 0);
        assert_eq!(nesting(b"\"unclosed [["), 2);
    }
}
