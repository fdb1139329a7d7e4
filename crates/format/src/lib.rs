//! oxzfs-format: the bytes ↔ structures layer of oxzfs.
//!
//! Everything OpenZFS writes to disk is decoded (and, where oxzfs writes it, encoded) here:
//! XDR nvlists, vdev labels and the uberblock ring, block pointers, dnodes and objsets, the
//! micro and fat ZAP, system attributes and the legacy znode, the DSL objects, checksums and
//! compression codecs, the persistent L2ARC header and log blocks. This crate is pure: no I/O, no threads, no global state. Every decoder
//! takes a byte slice and returns a value or a [`FormatError`] naming what is wrong; none panics
//! on any input and none allocates more than a bound derived from its input length (they are
//! fuzzed, see `fuzz/`).
//!
//! Byte order: OpenZFS writes structures in the host order of the writer and records which in
//! the block pointer (BP_GET_BYTEORDER) or by a magic number. Decoders take `le: bool` (true for
//! little-endian data) where the order comes from outside the structure.
#![forbid(unsafe_code)]

pub mod error;
pub mod bytes;
pub mod nvlist;
pub mod checksum;
pub mod compress;
pub mod label;
pub mod uberblock;
pub mod blkptr;
pub mod dnode;
pub mod objset;
pub mod zap;
pub mod sa;
pub mod znode;
pub mod dsl;
pub mod features;
pub mod types;
pub mod spacemap;
pub mod zap_write;
pub mod ddt;
pub mod zil;
pub mod l2arc;
pub mod removal;
pub mod drr;
pub mod crypt;

pub use error::{FormatError, Result};
