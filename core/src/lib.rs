//! hopchain-core: the reader and writer of hopchain's envelope, schema 2 (SPEC.md).
//!
//! Every function is total: any bytes give a verdict (accepted, or refused with one of
//! SPEC.md's reason codes and a JSON path), never a panic.

pub mod canonical;
pub mod deadletter;
pub mod digest;
pub mod envelope;
pub mod hop;
pub mod identity;
pub mod json;
pub mod layout;
pub mod legacy;
pub mod object;
pub mod path;
pub mod read;
pub mod reason;
pub mod rules;
pub mod sign;
pub mod text;
pub mod traceparent;
pub mod usual;
pub mod write;

#[cfg(feature = "python")]
mod python;

pub use envelope::{read_envelope, read_envelope_text, Envelope, Links};
pub use read::{read_record, Accepted, Header, Limits, Mode, Outcome, Record, Topic};
pub use reason::{Reason, Refusal};
pub use sign::Keyring;
pub use write::{
    append, append_owned, check_hop, identity_text, originate, originate_over, seal, Sealed,
    Written,
};
