//! A `chat.completion` body on arbitrary bytes: `parse_completion_bytes` never panics, and its
//! hand-written reader agrees with serde wherever it answers (the parser checks that itself in
//! fuzz builds, `cfg(fuzzing)`, and panics on any disagreement).
#![no_main]

use agentloop::provider::openai::parse_completion_bytes;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = parse_completion_bytes(data, "fuzz");
});
