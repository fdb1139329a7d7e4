//! pool (being written)
