//! uberblock (to be written)
