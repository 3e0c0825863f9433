//! The `Last-Event-ID` header of a reconnect on arbitrary bytes: a resume position or an
//! error, never a panic or a wrap-around (the position always follows the id it was given).
#![no_main]

use agentloop_server::requests::resume_after;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(from) = resume_after(data) {
        assert!(from >= 1, "a resume position follows an id");
        let id: usize = std::str::from_utf8(data)
            .expect("an accepted id is ASCII digits")
            .trim()
            .parse()
            .expect("an accepted id is a number");
        assert_eq!(from, id + 1);
    }
});
