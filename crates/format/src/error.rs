//! The format layer's error type: every decoder failure names the structure and what was wrong.

use std::fmt;

/// A decoding failure. `what` names the structure (for example "nvlist pair", "fat ZAP leaf").
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FormatError {
    /// The input ended before the structure did.
    Truncated { what: &'static str, need: usize, have: usize },
    /// A magic number did not match.
    BadMagic { what: &'static str, found: u64 },
    /// A field holds a value the format does not allow.
    Invalid { what: &'static str, detail: String },
    /// A valid value that this implementation does not support (names it).
    Unsupported { what: &'static str, detail: String },
    /// An embedded or computed checksum did not match.
    Checksum { what: &'static str },
}

pub type Result<T> = std::result::Result<T, FormatError>;

impl FormatError {
    pub fn invalid(what: &'static str, detail: impl Into<String>) -> Self {
        FormatError::Invalid { what, detail: detail.into() }
    }
    pub fn unsupported(what: &'static str, detail: impl Into<String>) -> Self {
        FormatError::Unsupported { what, detail: detail.into() }
    }
}

impl fmt::Display for FormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FormatError::Truncated { what, need, have } => {
                write!(f, "{what}: truncated (need {need} bytes, have {have})")
            }
            FormatError::BadMagic { what, found } => write!(f, "{what}: bad magic {found:#x}"),
            FormatError::Invalid { what, detail } => write!(f, "{what}: invalid: {detail}"),
            FormatError::Unsupported { what, detail } => write!(f, "{what}: unsupported: {detail}"),
            FormatError::Checksum { what } => write!(f, "{what}: checksum mismatch"),
        }
    }
}

impl std::error::Error for FormatError {}
