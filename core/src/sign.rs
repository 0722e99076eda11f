//! Hop signatures (SPEC.md section 4): HMAC-SHA256 with a shared secret, Ed25519 with a
//! private key whose readers hold only the public key. The message is always the hop's
//! digest, as its 64 ASCII characters.

use std::collections::HashMap;

use ed25519_dalek::{Signer, SigningKey, Verifier, VerifyingKey};
use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};

use crate::digest::{hex, unhex, Hex64};

const HMAC_PREFIX: &str = "hmac-sha256:";
const ED25519_PREFIX: &str = "ed25519:";

/// The id of a raw 32-byte Ed25519 public key: the first 16 hex digits of its SHA-256.
pub fn key_id(public: &[u8; 32]) -> String {
    let mut id = hex(&Sha256::digest(public));
    id.truncate(16);
    id
}

/// Keys by component: a reader that holds one of a component's keys requires its hops signed.
#[derive(Default, Clone)]
pub struct Keyring {
    hmac: HashMap<String, Vec<u8>>,
    signing: HashMap<String, (String, SigningKey)>,
    /// Public keys by component, then by key id; a key that is no curve point verifies nothing.
    verifying: HashMap<String, HashMap<String, Option<VerifyingKey>>>,
}

impl Keyring {
    pub fn new() -> Self {
        Keyring::default()
    }

    /// A shared HMAC secret of a component.
    pub fn add_hmac(&mut self, component: &str, key: &[u8]) {
        self.hmac.insert(component.to_owned(), key.to_vec());
    }

    /// A component's Ed25519 public key (raw 32 bytes); several may be held while keys rotate.
    pub fn add_public(&mut self, component: &str, public: &[u8; 32]) {
        self.verifying
            .entry(component.to_owned())
            .or_default()
            .insert(key_id(public), VerifyingKey::from_bytes(public).ok());
    }

    /// A component's Ed25519 signing key (its 32-byte seed); its public key verifies too.
    pub fn add_signing(&mut self, component: &str, seed: &[u8; 32]) {
        let key = SigningKey::from_bytes(seed);
        let public = key.verifying_key();
        let id = key_id(public.as_bytes());
        self.verifying
            .entry(component.to_owned())
            .or_default()
            .insert(id.clone(), Some(public));
        self.signing.insert(component.to_owned(), (id, key));
    }

    pub fn is_empty(&self) -> bool {
        self.hmac.is_empty() && self.verifying.is_empty()
    }

    /// Whether the keyring signs for, and requires signatures of, the component.
    pub fn has_key(&self, component: &str) -> bool {
        self.hmac.contains_key(component) || self.verifying.contains_key(component)
    }

    /// The component's signature of a digest (Ed25519 when it holds that key), or None.
    pub fn sign(&self, component: &str, digest: &Hex64) -> Option<String> {
        if let Some((id, key)) = self.signing.get(component) {
            let signature = key.sign(digest);
            return Some(format!(
                "{ED25519_PREFIX}{id}:{}",
                hex(&signature.to_bytes())
            ));
        }
        let key = self.hmac.get(component)?;
        Some(format!("{HMAC_PREFIX}{}", hex(&hmac_of(key, digest)?)))
    }

    /// Whether `signature` is the component's over the digest, with a key this keyring holds.
    pub fn verify(&self, component: &str, digest: &Hex64, signature: &str) -> bool {
        if let Some(rest) = signature.strip_prefix(ED25519_PREFIX) {
            let Some((id, value)) = rest.split_once(':') else {
                return false;
            };
            let Some(Some(key)) = self.verifying.get(component).and_then(|keys| keys.get(id))
            else {
                return false;
            };
            let Some(bytes) = unhex(value).and_then(|bytes| <[u8; 64]>::try_from(bytes).ok())
            else {
                return false;
            };
            let signature = ed25519_dalek::Signature::from_bytes(&bytes);
            return key.verify(digest, &signature).is_ok();
        }
        let Some(key) = self.hmac.get(component) else {
            return false;
        };
        let Some(value) = signature.strip_prefix(HMAC_PREFIX) else {
            return false;
        };
        let Some(given) = unhex(value) else {
            return false;
        };
        let Ok(mut mac) = <Hmac<Sha256> as KeyInit>::new_from_slice(key) else {
            return false;
        };
        mac.update(digest);
        // Lower-case hex only: the signature's text is what was signed into the chain.
        value == hex(&given) && mac.verify_slice(&given).is_ok()
    }
}

fn hmac_of(key: &[u8], digest: &Hex64) -> Option<Vec<u8>> {
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key).ok()?;
    mac.update(digest);
    Some(mac.finalize().into_bytes().to_vec())
}

impl std::fmt::Debug for Keyring {
    // Never print key material.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut components: Vec<&String> = self.hmac.keys().chain(self.verifying.keys()).collect();
        components.sort();
        components.dedup();
        write!(f, "Keyring(components={components:?})")
    }
}
