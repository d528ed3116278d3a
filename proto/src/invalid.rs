//! Why a message that decoded is still not one XO accepts: the reason
//! [`CodecError::Invalid`](crate::codec::CodecError::Invalid) carries, and
//! the dead-letter header's text. One enum, so a receiver matches on the
//! case instead of on words.

use crate::InvalidToken;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Invalid {
    /// An id that is not one subject token and store key.
    #[error(transparent)]
    Token(#[from] InvalidToken),
    /// A field that may not be empty.
    #[error("{field} is empty")]
    Empty { field: &'static str },
    /// A fraction outside 0..1 (or not a number).
    #[error("{field} is {value}, must be within 0..1")]
    Fraction { field: &'static str, value: f64 },
    /// A money amount or a count that is not finite, is negative, or is
    /// above [`MAX_AMOUNT`](crate::finite::MAX_AMOUNT).
    #[error("{field} must be a finite number from 0 to 1e12, got {value}")]
    Amount { field: &'static str, value: f64 },
    /// A text longer than the contract allows.
    #[error("{field} is {len} bytes, at most {max}")]
    TooLong {
        field: &'static str,
        len: usize,
        max: usize,
    },
    /// A list longer than the contract allows.
    #[error("{field} has {len} actions, at most {max}")]
    TooMany {
        field: &'static str,
        len: usize,
        max: usize,
    },
    /// A unit speaking on another unit's subject.
    #[error("unit {unit:?} does not match the subject's unit {subject:?}")]
    NotSubjectUnit { unit: String, subject: String },
    /// A report file that names another unit than the file's name.
    #[error("report names unit {named:?} but the file is for {file:?}")]
    NotFileUnit { named: String, file: String },
    /// A report file that could not be read (the I/O error's words).
    #[error("report file unreadable: {0}")]
    Unreadable(String),
    /// A report file in seed 000's own shape that cannot be mapped.
    #[error("seed-shaped report file: {0}")]
    SeedShaped(String),
}

/// The words of the reason, for callers that carry it as text.
impl From<Invalid> for String {
    fn from(e: Invalid) -> Self {
        e.to_string()
    }
}
