//! Tool descriptor files in JSON on arbitrary text: parsing returns a descriptor or a typed
//! error (with a location), never panics.
#![no_main]

use agentloop::registry::{Syntax, parse_descriptors};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    if let Err(error) = parse_descriptors(text, Syntax::Json, "fuzz.json") {
        let _ = error.to_string();
    }
});
