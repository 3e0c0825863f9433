//! Skip notices that show in every test log.

use std::io::Write;

/// Prints `SKIPPED: <reason>` straight to the process's stderr.
///
/// libtest captures `println!`/`eprintln!` of passing tests, so a test that returns early for
/// want of an optional tool (node, chromium, a model server) would pass silently; a direct write
/// bypasses the capture, and CI counts these lines.
pub fn skip(reason: &str) {
    let _ = writeln!(std::io::stderr().lock(), "SKIPPED: {reason}");
}
