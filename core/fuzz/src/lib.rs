//! What the fuzz targets of hopchain-core share: an input cut into its settings byte and its
//! fields, the keyrings a target reads with, and the checks every verdict must pass.
//!
//! An input is one settings byte, then fields separated by [`SEPARATOR`]. `seeds.py` writes
//! the seed corpora in this form from the test vectors and the crash vectors.

use std::sync::OnceLock;

use hopchain_core::{Header, Keyring, Reason, Refusal};

/// Between two fields: four bytes that no UTF-8 text holds, so a text field is never cut.
pub const SEPARATOR: &[u8] = b"\xf5\xf5\xf5\xf5";

/// An input: its settings byte (0 when empty) and its fields (at least one, maybe empty).
pub struct Input<'a> {
    pub settings: u8,
    pub fields: Vec<&'a [u8]>,
}

impl<'a> Input<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        let (settings, mut rest) = match data.split_first() {
            Some((settings, rest)) => (*settings, rest),
            None => (0, data),
        };
        let mut fields = Vec::new();
        while let Some(at) = rest
            .windows(SEPARATOR.len())
            .position(|window| window == SEPARATOR)
        {
            fields.push(rest.get(..at).unwrap_or_default());
            rest = rest.get(at + SEPARATOR.len()..).unwrap_or_default();
        }
        fields.push(rest);
        Input { settings, fields }
    }

    /// The field at `index`, empty when there is none.
    pub fn field(&self, index: usize) -> &'a [u8] {
        self.fields.get(index).copied().unwrap_or_default()
    }

    /// The settings' bit `bit` (0 to 7).
    pub fn flag(&self, bit: u8) -> bool {
        self.settings & (1 << bit) != 0
    }

    /// The keyring the settings' two low bits name (see [`keyring`]).
    pub fn keyring(&self) -> Option<&'static Keyring> {
        keyring(self.settings & 3)
    }
}

/// Headers from fields taken two by two (name, value); a name left without a value at the
/// end is a header whose value is null.
pub fn headers<'a>(fields: &[&'a [u8]]) -> Vec<Header<'a>> {
    fields
        .chunks(2)
        .filter_map(|pair| match *pair {
            [name, value] => Some(Header {
                name,
                value: Some(value),
            }),
            [name] => Some(Header { name, value: None }),
            _ => None,
        })
        .collect()
}

/// The keys of the test vectors and fixtures: an HMAC secret each for `ingest` (bytes 0x00 to
/// 0x1f) and `enrich` (0x20 to 0x3f), an Ed25519 seed each (0x40 to 0x5f, 0x60 to 0x7f).
fn key(first: u8) -> [u8; 32] {
    let mut key = [0u8; 32];
    for (byte, value) in key.iter_mut().zip(first..) {
        *byte = value;
    }
    key
}

/// 0: no keyring; 1: the HMAC keys; 2: the Ed25519 keys; 3: an empty keyring (read as none).
pub fn keyring(choice: u8) -> Option<&'static Keyring> {
    static KEYRINGS: OnceLock<[Keyring; 3]> = OnceLock::new();
    let [hmac, ed25519, empty] = KEYRINGS.get_or_init(|| {
        let mut hmac = Keyring::new();
        hmac.add_hmac("ingest", &key(0x00));
        hmac.add_hmac("enrich", &key(0x20));
        let mut ed25519 = Keyring::new();
        ed25519.add_signing("ingest", &key(0x40));
        ed25519.add_signing("enrich", &key(0x60));
        [hmac, ed25519, Keyring::new()]
    });
    match choice {
        1 => Some(hmac),
        2 => Some(ed25519),
        3 => Some(empty),
        _ => None,
    }
}

/// A refusal is whole: one of the crate's reason codes, a JSON path, a message.
pub fn check_refusal(refusal: &Refusal) {
    assert!(Reason::ALL.contains(&refusal.reason), "{refusal:?}");
    assert_eq!(
        Reason::from_code(refusal.reason.as_str()),
        Some(refusal.reason)
    );
    assert!(refusal.path.starts_with('$'), "{refusal:?}");
    assert!(!refusal.message.is_empty(), "{refusal:?}");
}

/// A number field as text (`1`, `-3`), 0 when it is not one.
pub fn number(field: &[u8]) -> i64 {
    std::str::from_utf8(field)
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or_default()
}
