//! nvlist (to be written)
