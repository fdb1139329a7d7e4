//! Fuzz the zle decoder (see codec.rs for the input layout and the checks).
#![no_main]
use libfuzzer_sys::fuzz_target;

#[path = "codec.rs"]
mod codec;

fuzz_target!(|data: &[u8]| codec::check(oxzfs_format::compress::ZIO_COMPRESS_ZLE, data));
