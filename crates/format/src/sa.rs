//! sa (to be written)
