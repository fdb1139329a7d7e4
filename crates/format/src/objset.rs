//! objset (to be written)
