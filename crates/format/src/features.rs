//! features (to be written)
