//! Engine errors. Corruption (bad bytes, bad checksums) is kept apart from I/O failure and from
//! "not found"; errno appears only at the FUSE/CLI edge through [`ZfsError::errno`].

use oxzfs_format::FormatError;
use std::fmt;

#[derive(Debug)]
pub enum ZfsError {
    /// A device read or write failed.
    Io { device: String, offset: u64, source: std::io::Error },
    /// Bytes that decoded wrongly; `context` names pool, vdev, object and offset where known.
    Corrupt { context: String, source: FormatError },
    /// A block whose checksum failed on every copy and every reconstruction.
    Checksum { context: String },
    /// A name that does not exist (pool, dataset, file, attribute).
    NotFound(String),
    /// Something valid that oxzfs does not (yet) do, named.
    Unsupported(String),
    /// The request is wrong: bad arguments, wrong state.
    Invalid(String),
    /// The pool cannot be opened: too many devices missing, unknown feature, etc.
    Unavailable(String),
    /// The target is read-only.
    ReadOnly,
    /// Not a directory / is a directory / not a symlink, etc.: carries the errno directly.
    Posix(i32, String),
}

pub type Result<T> = std::result::Result<T, ZfsError>;

impl ZfsError {
    pub fn corrupt(context: impl Into<String>, source: FormatError) -> Self {
        ZfsError::Corrupt { context: context.into(), source }
    }
    /// The errno the FUSE adapter returns for this error.
    pub fn errno(&self) -> i32 {
        match self {
            ZfsError::Io { .. } | ZfsError::Corrupt { .. } | ZfsError::Checksum { .. } => libc::EIO,
            ZfsError::NotFound(_) => libc::ENOENT,
            ZfsError::Unsupported(_) => libc::EOPNOTSUPP,
            ZfsError::Invalid(_) => libc::EINVAL,
            ZfsError::Unavailable(_) => libc::ENXIO,
            ZfsError::ReadOnly => libc::EROFS,
            ZfsError::Posix(e, _) => *e,
        }
    }
}

impl fmt::Display for ZfsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ZfsError::Io { device, offset, source } => write!(f, "I/O error on {device} at offset {offset:#x}: {source}"),
            ZfsError::Corrupt { context, source } => write!(f, "corrupt data ({context}): {source}"),
            ZfsError::Checksum { context } => write!(f, "checksum error ({context})"),
            ZfsError::NotFound(s) => write!(f, "{s}: not found"),
            ZfsError::Unsupported(s) => write!(f, "unsupported: {s}"),
            ZfsError::Invalid(s) => write!(f, "{s}"),
            ZfsError::Unavailable(s) => write!(f, "{s}"),
            ZfsError::ReadOnly => write!(f, "read-only file system"),
            ZfsError::Posix(_, s) => write!(f, "{s}"),
        }
    }
}

impl std::error::Error for ZfsError {}

impl From<FormatError> for ZfsError {
    fn from(e: FormatError) -> Self {
        ZfsError::Corrupt { context: String::new(), source: e }
    }
}
