//! Tool descriptor files in YAML (several documents) on arbitrary text: parsing returns
//! descriptors or a typed error (with a location), never panics.
#![no_main]

use agentloop::registry::{Syntax, parse_descriptors};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    if let Err(error) = parse_descriptors(text, Syntax::Yaml, "fuzz.yaml") {
        let _ = error.to_string();
    }
});
