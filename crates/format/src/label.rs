//! label (to be written)
