//! Any bytes as a checkpoint file: `decode` checks every length and offset
//! before it slices or allocates, and returns an error, never a panic.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = kynml_core::checkpoint::decode(data);
    let _ = kynml_core::checkpoint::decode_safetensors(data);
});
