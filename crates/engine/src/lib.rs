//! oxzfs engine (being written)
