//! dsl (to be written)
