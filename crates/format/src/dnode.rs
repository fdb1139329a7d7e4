//! dnode (to be written)
