//! Unit tests of configuration parsing: every error names its line and field.

use super::*;

const MINIMAL: &str = "\
pools:
  - name: a
    models: [m]
    replicas:
      - name: r0
        url: http://127.0.0.1:8001
      - name: r1
        url: http://127.0.0.1:8002
";

fn err(text: &str) -> ConfigError {
    Config::parse(text).expect_err("config should be rejected")
}

#[test]
fn example_config_parses() {
    let text = include_str!("../../../examples/static.yaml");
    let c = Config::parse(text).unwrap();
    assert_eq!(c.listen.to_string(), "127.0.0.1:8080");
    assert_eq!(c.admin.to_string(), "127.0.0.1:9090");
    assert_eq!(c.pools[0].replicas.len(), 4);
    assert_eq!(c.limits.max_body_bytes, 16 << 20);
}

#[test]
fn defaults_fill_everything_but_pools() {
    let c = Config::parse(MINIMAL).unwrap();
    assert_eq!(c.pools[0].role, Role::Both);
    assert_eq!(c.pools[0].engine, Engine::Vllm);
    assert_eq!(c.pools[0].metrics_path.as_deref(), Some("/metrics"));
    assert_eq!(c.limits.max_body_bytes, 16 << 20);
    assert_eq!(c.scheduling, SchedulerConfig::default());
    assert!(c.response_headers.replica);
}

#[test]
fn unknown_field_names_line_and_path() {
    let text = MINIMAL.replace(
        "        url: http://127.0.0.1:8002",
        "        urll: http://127.0.0.1:8002",
    );
    let e = err(&text);
    assert_eq!(e.line, Some(8), "{e}");
    assert_eq!(e.field, "pools[0].replicas[1]", "{e}");
    assert!(e.message.contains("unknown field `urll`"), "{e}");
    assert!(
        e.to_string()
            .starts_with("config:8: field `pools[0].replicas[1]`"),
        "{e}"
    );
}

#[test]
fn wrong_type_names_line_and_path() {
    let text = format!("{MINIMAL}limits:\n  max_body_bytes: lots\n");
    let e = err(&text);
    assert_eq!(e.line, Some(10), "{e}");
    assert_eq!(e.field, "limits.max_body_bytes", "{e}");
}

#[test]
fn missing_required_field() {
    let e = err("pools:\n  - name: a\n    replicas: []\n");
    assert!(e.message.contains("missing field `models`"), "{e}");
    assert_eq!(e.field, "pools[0]");
    assert_eq!(e.line, Some(2));
}

#[test]
fn top_level_unknown_field() {
    let e = err(&format!("{MINIMAL}lisen: 1.2.3.4:5\n"));
    assert!(e.message.contains("unknown field `lisen`"), "{e}");
    assert_eq!(e.line, Some(9));
}

#[test]
fn bad_url_is_located() {
    let text = MINIMAL.replace("http://127.0.0.1:8002", "https://127.0.0.1:8002");
    let e = err(&text);
    assert_eq!(e.field, "pools[0].replicas[1].url");
    assert_eq!(e.line, Some(8));
    assert!(e.message.contains("scheme `https`"), "{e}");
    for bad in ["127.0.0.1:8002", "http://127.0.0.1:8002/v1", "not a url"] {
        let e = err(&MINIMAL.replace("http://127.0.0.1:8002", bad));
        assert_eq!(e.field, "pools[0].replicas[1].url", "{bad}: {e}");
        assert_eq!(e.line, Some(8), "{bad}: {e}");
    }
}

#[test]
fn duplicate_replica_names_across_pools() {
    let text = format!(
        "{MINIMAL}  - name: b\n    models: [m2]\n    replicas:\n      - {{ name: r1, url: \"http://127.0.0.1:9000\" }}\n"
    );
    let e = err(&text);
    assert_eq!(e.field, "pools[1].replicas[0].name");
    assert_eq!(e.line, Some(12), "{e}");
    assert!(e.message.contains("duplicate replica name `r1`"), "{e}");
}

#[test]
fn semantic_checks() {
    let cases: &[(&str, &str)] = &[
        (
            "scrape:\n  interval_ms: 100\n  stale_after_ms: 100\n",
            "scrape.stale_after_ms",
        ),
        (
            "scheduling:\n  weights:\n    prefix: -1\n",
            "scheduling.weights.prefix",
        ),
        ("index:\n  block_bytes: 4\n", "index.block_bytes"),
        ("limits:\n  max_body_bytes: 10\n", "limits.max_body_bytes"),
        ("timeouts:\n  connect_ms: 0\n", "timeouts.connect_ms"),
        ("listen: 127.0.0.1:7000\nadmin: 127.0.0.1:7000\n", "admin"),
    ];
    for (extra, field) in cases {
        let e = err(&format!("{MINIMAL}{extra}"));
        assert_eq!(&e.field, field, "{extra}: {e}");
        assert!(e.line.is_some_and(|l| l > 8), "{extra}: {e}");
    }
}

#[test]
fn scheduling_policy_is_checked_by_serde() {
    let e = err(&format!("{MINIMAL}scheduling:\n  policy: fastest\n"));
    assert_eq!(e.field, "scheduling.policy", "{e}");
    assert_eq!(e.line, Some(10));
}

#[test]
fn empty_pools_are_valid_and_yaml_syntax_is_located() {
    // The Helm chart's default has no pools; the router must start (not ready) rather than exit.
    assert!(Config::parse("pools: []\n").unwrap().pools.is_empty());
    let e = err("pools:\n  - name: [unclosed\n");
    assert!(e.line.is_some(), "{e}");
}

#[test]
fn line_locator_follows_flow_and_block_styles() {
    let text = "a:\n  b: [x, {c: 1}]\n  d:\n    - e: 2\n    - e: 3\n";
    let p = FieldPath::root();
    assert_eq!(
        locate::line_of(text, &p.key("a").key("b").index(1).key("c")),
        Some(2)
    );
    assert_eq!(
        locate::line_of(text, &p.key("a").key("d").index(1).key("e")),
        Some(5)
    );
    assert_eq!(locate::line_of(text, &p.key("a").key("zz")), None);
}
