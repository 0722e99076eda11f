//! The envelope text's layout (SPEC.md section 3.1): where the identity, the hops, the digests
//! and the signatures are, found by searching, never by parsing.

use std::ops::Range;

use memchr::memmem;

/// Between the identity and the first hop.
pub const CHAIN_START: &[u8] = b",\"chain\":[\n";
/// Between the last hop and the digests.
pub const CHAIN_END: &[u8] = b"\n],\"digests\":";
/// Between the digests and the signatures.
pub const SIGNATURES: &[u8] = b",\"signatures\":";
/// Between two hops.
pub const HOP_SEPARATOR: &[u8] = b",\n";

/// Where the parts of an envelope text are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Where `,"chain":[` LF starts: the identity is the text before it, and a `}`.
    pub start: usize,
    /// The line feed that ends the chain.
    pub end: usize,
    /// The `]` that closes the digests.
    pub middle: usize,
    /// The `]` that closes the signatures: what follows is `}` or the payload member.
    pub close: usize,
    /// Each hop's bytes, as split at `,` LF.
    pub hops: Vec<Range<usize>>,
}

impl Layout {
    /// The digests' text, from `[` to `]`.
    pub fn digests(&self) -> Range<usize> {
        self.end + CHAIN_END.len()..self.middle + 1
    }

    /// The signatures' text, from `[` to its first `]`.
    pub fn signatures(&self) -> Range<usize> {
        self.middle + 1 + SIGNATURES.len()..self.close + 1
    }

    /// The text of the whole chain, between `[` LF and LF `]`.
    pub fn chain(&self) -> Range<usize> {
        self.start + CHAIN_START.len()..self.end.max(self.start + CHAIN_START.len())
    }
}

/// Whether a text is in schema 2's layout at all (told without parsing it).
pub fn is_v2(text: &[u8]) -> bool {
    memmem::find(text, CHAIN_START).is_some()
}

/// Find the layout's parts; None when the text is not in it (`not_canonical` at `$`).
///
/// The chain ends at the first LF `],"digests":` from the chain's start (an empty chain's
/// LF is its start's own), the digests at the first `]` after it and the signatures at the
/// next `]`, which `,"signatures":` must follow the digests to open.
pub fn find(text: &[u8]) -> Option<Layout> {
    let start = memmem::find(text, CHAIN_START).filter(|&start| start > 0)?;
    let first = start + CHAIN_START.len();
    let end = first - 1 + memmem::find(text.get(first - 1..)?, CHAIN_END)?;
    let after = end + CHAIN_END.len();
    let middle = after + memchr::memchr(b']', text.get(after..)?)?;
    let close = middle + 1 + memchr::memchr(b']', text.get(middle + 1..)?)?;
    if !text.get(middle + 1..)?.starts_with(SIGNATURES) {
        return None;
    }
    let mut hops = Vec::new();
    if end < first {
        hops.push(first..first); // `[` LF `]`: no hop at all
    } else {
        let chain = text.get(first..end)?;
        let mut from = 0;
        for split in memmem::find_iter(chain, HOP_SEPARATOR) {
            if split < from {
                continue; // overlapping separators (",\n" cannot overlap itself)
            }
            hops.push(first + from..first + split);
            from = split + HOP_SEPARATOR.len();
        }
        hops.push(first + from..end);
    }
    Some(Layout {
        start,
        end,
        middle,
        close,
        hops,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_hops_by_splitting() {
        let text = b"{\"a\":1,\"chain\":[\n{\"x\":1},\n{\"y\":2}\n],\"digests\":[\"d\"],\"signatures\":[null]}";
        let Some(layout) = find(text) else {
            unreachable!("in the layout")
        };
        let hops: Vec<&[u8]> = layout
            .hops
            .iter()
            .map(|range| text.get(range.clone()).unwrap_or_default())
            .collect();
        assert_eq!(hops, vec![&b"{\"x\":1}"[..], &b"{\"y\":2}"[..]]);
        assert_eq!(text.get(layout.digests()), Some(&b"[\"d\"]"[..]));
        assert_eq!(text.get(layout.signatures()), Some(&b"[null]"[..]));
        assert_eq!(text.get(layout.close + 1..), Some(&b"}"[..]));
    }

    #[test]
    fn an_empty_chain_has_one_empty_piece() {
        let text = b"{\"a\":1,\"chain\":[\n],\"digests\":[],\"signatures\":[]}";
        let layout = find(text);
        let hops = layout.map(|layout| layout.hops).unwrap_or_default();
        assert_eq!(hops.len(), 1);
        assert_eq!(hops.first(), Some(&(17..17)));
    }

    #[test]
    fn refuses_other_layouts() {
        assert_eq!(find(b"{\"a\":1}"), None);
        assert_eq!(
            find(b",\"chain\":[\n{}\n],\"digests\":[],\"signatures\":[]}"),
            None
        );
        assert_eq!(find(b"{,\"chain\":[\n{}\n],\"digests\":[]}"), None);
    }
}
