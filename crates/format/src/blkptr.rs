//! blkptr (to be written)
