//! The binary refuses a bad environment before touching any cluster, and says what to fix.
//! (Also makes `cargo test --workspace` build the binary, which the cluster tests then run.)

use std::process::Command;

fn run(env: &[(&str, &str)]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_warmpath-controller"))
        .env_clear()
        .envs(env.iter().copied())
        .output()
        .expect("run warmpath-controller");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_missing_lease_namespace_is_named() {
    let (code, err) = run(&[]);
    assert_ne!(code, 0);
    assert!(
        err.contains("--lease-namespace (WARMPATH_LEASE_NAMESPACE) is not set"),
        "{err}"
    );
}

#[test]
fn help_lists_every_flag_with_its_variable_and_a_flag_wins() {
    let out = Command::new(env!("CARGO_BIN_EXE_warmpath-controller"))
        .env_clear()
        .arg("--help")
        .output()
        .expect("run warmpath-controller --help");
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for (flag, env) in [
        ("--lease-namespace", "WARMPATH_LEASE_NAMESPACE"),
        ("--watch-namespaces", "WARMPATH_WATCH_NAMESPACES"),
        ("--identity", "POD_NAME"),
    ] {
        assert!(help.contains(flag) && help.contains(env), "{flag}: {help}");
    }
    // The flag's bad value is refused by its name, although the variable is fine.
    let out = Command::new(env!("CARGO_BIN_EXE_warmpath-controller"))
        .env_clear()
        .env("WARMPATH_LEASE_NAMESPACE", "ns")
        .env("WARMPATH_LEASE_DURATION_SECONDS", "30")
        .args(["--lease-duration-seconds", "soon"])
        .output()
        .expect("run warmpath-controller");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--lease-duration-seconds"), "{err}");
}

#[test]
fn inconsistent_lease_timings_are_explained() {
    let (code, err) = run(&[
        ("WARMPATH_LEASE_NAMESPACE", "ns"),
        ("WARMPATH_LEASE_DURATION_SECONDS", "2"),
        ("WARMPATH_LEASE_RENEW_DEADLINE_SECONDS", "5"),
    ]);
    assert_ne!(code, 0);
    assert!(err.contains("duration (2s) > renew deadline (5s)"), "{err}");
}

#[test]
fn a_bad_number_is_refused() {
    let (code, err) = run(&[
        ("WARMPATH_LEASE_NAMESPACE", "ns"),
        ("WARMPATH_LEASE_DURATION_SECONDS", "soon"),
    ]);
    assert_ne!(code, 0);
    assert!(err.contains("WARMPATH_LEASE_DURATION_SECONDS"), "{err}");
}
