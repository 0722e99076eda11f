//! SHA-256 digests of SPEC.md section 4: the genesis, each hop's link, a payload's digest.

use sha2::{Digest, Sha256};

/// What the genesis digest's text starts with, before the identity.
pub const GENESIS_PREFIX: &[u8] = b"hopchain-v2 genesis\n";

/// 64 lower-case hex characters.
pub type Hex64 = [u8; 64];

/// Lower-case hex of bytes.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for &byte in bytes {
        for nibble in [byte >> 4, byte & 0xf] {
            out.push(char::from(
                DIGITS.get(usize::from(nibble)).copied().unwrap_or(b'0'),
            ));
        }
    }
    out
}

fn hex64(digest: &[u8]) -> Hex64 {
    let mut out = [b'0'; 64];
    for (pair, &byte) in out.chunks_exact_mut(2).zip(digest) {
        pair.copy_from_slice(&[hex_digit(byte >> 4), hex_digit(byte & 0xf)]);
    }
    out
}

/// A nibble's lower-case hex digit, computed (no table to index: one is written per
/// digest byte of every hop read).
const fn hex_digit(nibble: u8) -> u8 {
    if nibble < 10 {
        b'0' + nibble
    } else {
        b'a' - 10 + nibble
    }
}

/// SHA-256 of a payload's bytes, in hex.
pub fn payload_digest(payload: &[u8]) -> Hex64 {
    hex64(&Sha256::digest(payload))
}

/// `G = SHA-256("hopchain-v2 genesis" LF || I)`, `I` the identity's canonical text.
pub fn genesis(identity: &[u8]) -> Hex64 {
    let mut hasher = Sha256::new();
    hasher.update(GENESIS_PREFIX);
    hasher.update(identity);
    hex64(&hasher.finalize())
}

/// `d(i) = SHA-256(d(i-1) || LF || H(i))`, with the previous digest as its 64 hex characters.
pub fn link(previous: &Hex64, hop: &[u8]) -> Hex64 {
    let mut hasher = Sha256::new();
    hasher.update(previous);
    hasher.update(b"\n");
    hasher.update(hop);
    hex64(&hasher.finalize())
}

/// Parse 64 hex characters (lower case) into a digest.
pub fn from_text(text: &[u8]) -> Option<Hex64> {
    let bytes: &[u8; 64] = text.try_into().ok()?;
    bytes
        .iter()
        .all(|byte| matches!(byte, b'0'..=b'9' | b'a'..=b'f'))
        .then_some(*bytes)
}

/// Raw bytes of an even-length hex text.
pub fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    text.as_bytes()
        .chunks(2)
        .map(|pair| {
            let high = char::from(*pair.first()?).to_digit(16)?;
            let low = char::from(*pair.get(1)?).to_digit(16)?;
            u8::try_from(high * 16 + low).ok()
        })
        .collect()
}
