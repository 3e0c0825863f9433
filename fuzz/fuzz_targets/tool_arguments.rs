//! Tool-call arguments on arbitrary text: `parse_arguments` never panics.
#![no_main]

use agentloop::stream::parse_arguments;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = parse_arguments(text);
    }
});
