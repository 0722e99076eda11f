//! The usual object read in one pass: canonical, valid, without an escape. The scan knows
//! each member's place (canonical text has every member, sorted, without white space), so it
//! reads and checks at once and builds nothing. Anything else, it leaves to the careful
//! reading (`object::read_object`), which names the first fault: this pass accepts only what
//! that one accepts, and refuses nothing itself.

use crate::rules::{Rule, Text, MAX_INT};

/// A top-level member's value, as the scan found it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Found<'a> {
    Str(&'a str),
    Int(i64),
    Null,
    /// An object, array or boolean: its text.
    Other(&'a str),
}

struct Scan<'a> {
    text: &'a str,
    at: usize,
}

impl<'a> Scan<'a> {
    fn byte(&self) -> Option<u8> {
        self.text.as_bytes().get(self.at).copied()
    }

    fn literal(&mut self, bytes: &[u8]) -> Option<()> {
        let end = self.at + bytes.len();
        (self.text.as_bytes().get(self.at..end)? == bytes).then(|| self.at = end)
    }

    /// A member's name and its colon, `"name":`, told in one look at the bytes.
    fn name(&mut self, name: &[u8]) -> Option<()> {
        let end = self.at + name.len() + 3;
        let (open, rest) = self.text.as_bytes().get(self.at..end)?.split_first()?;
        let (spelled, close) = rest.split_at_checked(name.len())?;
        (*open == b'"' && close == b"\":" && spelled == name).then(|| self.at = end)
    }

    /// A string without escapes or control characters: its content, and whether it is
    /// ASCII (told in the same pass).
    fn string(&mut self) -> Option<(&'a str, bool)> {
        self.literal(b"\"")?;
        let rest = self.text.as_bytes().get(self.at..)?;
        let (length, ascii) = plain_end(rest);
        let length = length.filter(|&length| rest.get(length) == Some(&b'"'))?;
        let content = self.text.get(self.at..self.at + length)?;
        self.at += length + 1;
        Some((content, ascii))
    }

    /// An integer in its one spelling, within 2^53 - 1.
    fn integer(&mut self) -> Option<i64> {
        let start = self.at;
        let negative = self.byte() == Some(b'-');
        if negative {
            self.at += 1;
        }
        let digits = self.at;
        while matches!(self.byte(), Some(b'0'..=b'9')) {
            self.at += 1;
        }
        let text = self.text.get(digits..self.at)?;
        if text.is_empty()
            || (text.len() > 1 && text.starts_with('0'))
            || (negative && text == "0")
            || text.len() > 16
            || matches!(self.byte(), Some(b'.' | b'e' | b'E'))
        {
            return None;
        }
        let value: i64 = self.text.get(start..self.at)?.parse().ok()?;
        (i128::from(value).abs() <= MAX_INT).then_some(value)
    }

    fn value(&mut self, rule: &Rule) -> Option<Found<'a>> {
        let start = self.at;
        match rule {
            Rule::Nullable(inner) => {
                if self.literal(b"null").is_some() {
                    return Some(Found::Null);
                }
                self.value(inner)
            }
            Rule::Any => self.literal(b"null").map(|()| Found::Null),
            Rule::Boolean => {
                if self.literal(b"true").is_none() {
                    self.literal(b"false")?;
                }
                Some(Found::Other(self.text.get(start..self.at)?))
            }
            Rule::Integer { min } => {
                let value = self.integer()?;
                (i128::from(value) >= *min).then_some(Found::Int(value))
            }
            Rule::Word(words) => {
                let (word, _) = self.string()?;
                words.contains(&word).then_some(Found::Str(word))
            }
            Rule::Text(rules) => {
                let (text, ascii) = self.string()?;
                text_fits(rules, text, ascii).then_some(Found::Str(text))
            }
            Rule::List(item) => {
                self.literal(b"[")?;
                if self.literal(b"]").is_none() {
                    loop {
                        self.value(item)?;
                        if self.literal(b",").is_none() {
                            self.literal(b"]")?;
                            break;
                        }
                    }
                }
                Some(Found::Other(self.text.get(start..self.at)?))
            }
            Rule::Object(members) => {
                self.object(members, &mut |_, _| {})?;
                Some(Found::Other(self.text.get(start..self.at)?))
            }
        }
    }

    fn object(
        &mut self,
        members: &[(&'static str, Rule)],
        found: &mut dyn FnMut(usize, Found<'a>),
    ) -> Option<()> {
        self.literal(b"{")?;
        for (index, (name, rule)) in members.iter().enumerate() {
            if index > 0 {
                self.literal(b",")?;
            }
            self.name(name.as_bytes())?;
            let value = self.value(rule)?;
            found(index, value);
        }
        self.literal(b"}")
    }
}

/// Where the first `"`, `\\` or control character of `bytes` is, and whether the bytes
/// before it are ASCII. Eight bytes are looked at a time (the strings of an envelope are
/// mostly plain text); the eight holding the first such byte, one at a time.
fn plain_end(bytes: &[u8]) -> (Option<usize>, bool) {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    // A byte of `word` that is zero sets its high bit in `zero(word)` (and only a byte
    // above a zero one can be set falsely): the chunk holding one is read byte by byte.
    let zero = |word: u64| word.wrapping_sub(ONES) & !word & HIGHS;
    let mut seen = 0u64;
    let mut offset = 0;
    for chunk in bytes.chunks_exact(8) {
        let Ok(chunk) = <[u8; 8]>::try_from(chunk) else {
            break;
        };
        let word = u64::from_le_bytes(chunk);
        let control = word.wrapping_sub(ONES * 0x20) & !word & HIGHS;
        if zero(word ^ (ONES * u64::from(b'"'))) | zero(word ^ (ONES * u64::from(b'\\'))) | control
            != 0
        {
            break;
        }
        seen |= word;
        offset += 8;
    }
    let mut ascii = seen & HIGHS == 0;
    for (index, &byte) in bytes.get(offset..).unwrap_or_default().iter().enumerate() {
        match byte {
            b'"' | b'\\' | 0..0x20 => return (Some(offset + index), ascii),
            0x80.. => ascii = false,
            _ => {}
        }
    }
    (None, ascii)
}

fn text_fits(rules: &Text, text: &str, ascii: bool) -> bool {
    let length = if ascii {
        text.len()
    } else {
        text.chars().count()
    };
    length >= rules.min
        && rules.max.is_none_or(|max| length <= max)
        && rules.shape.is_none_or(|shape| shape(text))
}

/// The top-level members of `text` when it is the usual, canonical object of `rule`, in the
/// rule's order; None for any other text (the careful reading says why), and for a rule of
/// other than `N` members.
pub fn read_usual<'a, const N: usize>(text: &'a str, rule: &Rule) -> Option<[Found<'a>; N]> {
    let Rule::Object(members) = rule else {
        return None;
    };
    if members.len() != N {
        return None;
    }
    let mut scan = Scan { text, at: 0 };
    // Held in place, not in a vector: a hop read costs no allocation for its members.
    let mut values = [Found::Null; N];
    scan.object(members, &mut |index, value| {
        if let Some(slot) = values.get_mut(index) {
            *slot = value;
        }
    })?;
    (scan.at == text.len()).then_some(values)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::HOP;

    const HOP_TEXT: &str = concat!(
        r#"{"component":"ingest","contract":"claims","contract_version":1,"#,
        r#""decided_at":"2026-03-01T09:30:00Z","decision":"originated","degradation":null,"#,
        r#""destination":"claims","effects":[],"failure":null,"instance":"i-1","#,
        r#""observation":"","payload_digest":null,"received_at":null,"received_from":null,"#,
        r#""span_id":"a000000000000001","tries":[]}"#
    );

    #[test]
    fn reads_the_usual_hop() {
        let found: Option<[Found<'_>; 16]> = read_usual(HOP_TEXT, &HOP);
        assert_eq!(
            found.and_then(|found| found.first().copied()),
            Some(Found::Str("ingest"))
        );
        assert_eq!(read_usual::<15>(HOP_TEXT, &HOP), None);
    }

    #[test]
    fn the_readers_hold_as_many_members_as_their_rules_have() {
        // hop.rs reads 16 members, identity.rs 10: a rule of another length is never read
        // in one pass (every hop would be read carefully, and slowly).
        let members = |rule: &Rule| match rule {
            Rule::Object(members) => members.len(),
            _ => 0,
        };
        assert_eq!(members(&HOP), 16);
        assert_eq!(members(&crate::rules::IDENTITY), 10);
    }

    #[test]
    fn finds_the_end_of_a_plain_string_as_one_byte_at_a_time_does() {
        let one_at_a_time = |bytes: &[u8]| {
            let end = bytes
                .iter()
                .position(|&byte| matches!(byte, b'"' | b'\\' | 0..0x20));
            let before = bytes.get(..end.unwrap_or(bytes.len())).unwrap_or_default();
            (end, before.is_ascii())
        };
        let mut texts: Vec<Vec<u8>> = Vec::new();
        for length in 0..20 {
            for stop in [b'"', b'\\', b'\n', 0x1f, 0x00, 0x7f, 0x20, 0xc3, 0xff] {
                for at in 0..=length {
                    let mut text = vec![b'a'; length];
                    text.insert(at, stop);
                    texts.push(text.clone());
                    text.insert(0, 0xe2); // a multi-byte character's first byte before it
                    texts.push(text);
                }
            }
        }
        for text in &texts {
            assert_eq!(plain_end(text), one_at_a_time(text), "{text:?}");
        }
    }

    #[test]
    fn leaves_anything_else_to_the_careful_reading() {
        for text in [
            HOP_TEXT.replace("\"contract_version\":1", "\"contract_version\":1.0"),
            HOP_TEXT.replace("\"contract_version\":1", "\"contract_version\":01"),
            HOP_TEXT.replace("\"contract_version\":1", "\"contract_version\":0"),
            HOP_TEXT.replace("\"observation\":\"\"", "\"observation\":\"\\n\""),
            HOP_TEXT.replace("originated", "improvised"),
            HOP_TEXT.replace(",\"tries\":[]", ""),
            HOP_TEXT.replace("{\"component", "{ \"component"),
            format!("{HOP_TEXT} "),
        ] {
            assert_eq!(read_usual::<16>(&text, &HOP), None, "{text}");
        }
    }
}
