//! FUSE adapter (being written)
