//! znode (to be written)
