//! compress (to be written)
