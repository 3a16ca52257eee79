//! Tests of optional dependencies (a browser, Python packages, a font, real engines): a missing
//! one is a loud skip written to the process's stderr (not through `eprintln!`, which the test
//! harness captures and hides for a test that passes), or a failure when the test's
//! `*_REQUIRED` switch is `1`: CI sets one for every dependency it installs, so that nothing it
//! is meant to run skips unseen.

use std::io::Write;

/// Whether the switch `required_env` is on (`1`).
pub fn required(required_env: &str) -> bool {
    std::env::var(required_env).is_ok_and(|v| v == "1")
}

/// `test` cannot run here because `why` (say how to get it): a failure when `required_env` is
/// on, otherwise a loud SKIP line. The caller returns from the test after it.
///
/// # Panics
/// When `required_env` is `1`.
pub fn skip(test: &str, required_env: &str, why: &str) {
    assert!(
        !required(required_env),
        "{test}: {required_env}=1 but {why}"
    );
    let _ = writeln!(
        std::io::stderr(),
        "\n*** SKIPPED {test}: {why} ({required_env}=1 makes this a failure) ***\n"
    );
}
