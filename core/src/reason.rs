//! Why a record is refused: hopchain's reason codes, one variant each, and where it broke.

use std::fmt;

/// A reason code of SPEC.md section 5 (hopchain's `ReasonCode`). The strings are stable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reason {
    Tombstone,
    EmptyValue,
    NotUtf8,
    DuplicateHeader,
    MissingHeader,
    BadJson,
    TooDeep,
    MissingField,
    WrongType,
    InvalidValue,
    UnknownField,
    UnknownErrorType,
    UnknownDecision,
    UnknownVocabulary,
    NewerMajorVersion,
    PayloadInvalid,
    ContractMismatch,
    BadTraceparent,
    BadDigest,
    BadSignature,
    UnsignedHop,
    ChainRewritten,
    HopLimit,
    DescriptionTooLong,
    Oversize,
    NotCanonical,
    TruncatedChain,
    PayloadMismatch,
    UnexpectedWriter,
    ContractError,
    ReaderError,
    WrongMagicByte,
    UnknownSchema,
    UnresolvableSchema,
    UndecodablePayload,
}

impl Reason {
    /// Every code, in the order hopchain's `ReasonCode` declares them.
    pub const ALL: [Reason; 35] = [
        Reason::Tombstone,
        Reason::EmptyValue,
        Reason::NotUtf8,
        Reason::DuplicateHeader,
        Reason::MissingHeader,
        Reason::BadJson,
        Reason::TooDeep,
        Reason::MissingField,
        Reason::WrongType,
        Reason::InvalidValue,
        Reason::UnknownField,
        Reason::UnknownErrorType,
        Reason::UnknownDecision,
        Reason::UnknownVocabulary,
        Reason::NewerMajorVersion,
        Reason::PayloadInvalid,
        Reason::ContractMismatch,
        Reason::BadTraceparent,
        Reason::BadDigest,
        Reason::BadSignature,
        Reason::UnsignedHop,
        Reason::ChainRewritten,
        Reason::HopLimit,
        Reason::DescriptionTooLong,
        Reason::Oversize,
        Reason::NotCanonical,
        Reason::TruncatedChain,
        Reason::PayloadMismatch,
        Reason::UnexpectedWriter,
        Reason::ContractError,
        Reason::ReaderError,
        Reason::WrongMagicByte,
        Reason::UnknownSchema,
        Reason::UnresolvableSchema,
        Reason::UndecodablePayload,
    ];

    /// The code as it travels (a dead letter's reason, a validation issue's `code`).
    pub const fn as_str(self) -> &'static str {
        match self {
            Reason::Tombstone => "tombstone",
            Reason::EmptyValue => "empty_value",
            Reason::NotUtf8 => "not_utf8",
            Reason::DuplicateHeader => "duplicate_header",
            Reason::MissingHeader => "missing_header",
            Reason::BadJson => "bad_json",
            Reason::TooDeep => "too_deep",
            Reason::MissingField => "missing_field",
            Reason::WrongType => "wrong_type",
            Reason::InvalidValue => "invalid_value",
            Reason::UnknownField => "unknown_field",
            Reason::UnknownErrorType => "unknown_error_type",
            Reason::UnknownDecision => "unknown_decision",
            Reason::UnknownVocabulary => "unknown_vocabulary",
            Reason::NewerMajorVersion => "newer_major_version",
            Reason::PayloadInvalid => "payload_invalid",
            Reason::ContractMismatch => "contract_mismatch",
            Reason::BadTraceparent => "bad_traceparent",
            Reason::BadDigest => "bad_digest",
            Reason::BadSignature => "bad_signature",
            Reason::UnsignedHop => "unsigned_hop",
            Reason::ChainRewritten => "chain_rewritten",
            Reason::HopLimit => "hop_limit",
            Reason::DescriptionTooLong => "description_too_long",
            Reason::Oversize => "oversize",
            Reason::NotCanonical => "not_canonical",
            Reason::TruncatedChain => "truncated_chain",
            Reason::PayloadMismatch => "payload_mismatch",
            Reason::UnexpectedWriter => "unexpected_writer",
            Reason::ContractError => "contract_error",
            Reason::ReaderError => "reader_error",
            Reason::WrongMagicByte => "wrong_magic_byte",
            Reason::UnknownSchema => "unknown_schema",
            Reason::UnresolvableSchema => "unresolvable_schema",
            Reason::UndecodablePayload => "undecodable_payload",
        }
    }

    /// The code of a string, for a validation issue's `code` member.
    pub fn from_code(text: &str) -> Option<Reason> {
        Reason::ALL
            .into_iter()
            .find(|reason| reason.as_str() == text)
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A refusal: the reason code, the JSON path of what broke, and a message for people.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub reason: Reason,
    pub path: String,
    pub message: String,
}

impl Refusal {
    pub fn new(reason: Reason, path: impl Into<String>, message: impl Into<String>) -> Self {
        Refusal {
            reason,
            path: path.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at {}: {}", self.reason, self.path, self.message)
    }
}

impl std::error::Error for Refusal {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_reads_back_as_itself() {
        for reason in Reason::ALL {
            assert_eq!(Reason::from_code(reason.as_str()), Some(reason));
        }
        assert_eq!(Reason::from_code("nope"), None);
    }
}
