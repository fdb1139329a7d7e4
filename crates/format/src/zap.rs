//! zap (to be written)
