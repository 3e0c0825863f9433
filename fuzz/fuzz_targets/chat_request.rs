//! The chat server's request bodies on arbitrary bytes: `POST /v1/chat` and the AI SDK UI
//! chat body decode to a value or a serde error, never a panic.
#![no_main]

use agentloop_server::requests::{ChatRequest, UiChatRequest};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = serde_json::from_slice::<ChatRequest>(data);
    let _ = serde_json::from_slice::<UiChatRequest>(data);
});
