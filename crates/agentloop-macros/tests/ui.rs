//! Misuse of `#[tool]` is a compile error that says what to write instead. The expected
//! messages are in `tests/ui/*.stderr`; `TRYBUILD=overwrite` rewrites them after a change.

#[test]
fn misuse_fails_to_compile_with_a_clear_message() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/ui/*.rs");
}
