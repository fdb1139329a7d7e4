//! types (to be written)
