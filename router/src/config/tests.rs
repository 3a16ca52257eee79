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
    // Idle upstream connections are dropped before vLLM's uvicorn drops them (5 s).
    assert!(c.timeouts.pool_idle_ms < 5_000);
    assert!(Config::parse(MINIMAL).unwrap().timeouts.pool_idle_ms < 5_000);
}

#[test]
fn the_pd_example_parses() {
    let c = Config::parse(include_str!("../../../examples/pd/static.yaml")).unwrap();
    assert_eq!(c.pools[0].role, Role::Prefill);
    assert_eq!(c.pools[1].role, Role::Decode);
    assert_eq!(c.pd.connector, super::Connector::Nixl);
    assert_eq!(c.pd.threshold_tokens, 1024);
    // The Helm example's `pd` block is the router's own.
    let values: serde_yaml::Value =
        serde_yaml::from_str(include_str!("../../../examples/pd/values.yaml")).unwrap();
    let pd = serde_yaml::to_string(&values["router"]["config"]["pd"]).unwrap();
    let with = format!("{MINIMAL}pd:\n{}", indent(&pd));
    let c = Config::parse(&with).unwrap_or_else(|e| panic!("{e}\n{with}"));
    assert_eq!(c.pd.connector, super::Connector::Sidecar);
}

fn indent(s: &str) -> String {
    s.lines().map(|l| format!("  {l}\n")).collect()
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
        ("scrape:\n  engine_share: 0\n", "scrape.engine_share"),
        ("scrape:\n  engine_share: 1.5\n", "scrape.engine_share"),
        (
            "scrape:\n  interval_ms: 100\n  max_interval_ms: 50\n",
            "scrape.max_interval_ms",
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

/// `MINIMAL` with `section: {value}` added must be rejected at `field` with a message saying
/// `says`, for each `(value, field, says)`.
fn section_rejects(section: &str, cases: &[(&str, &str, &str)]) {
    for (value, field, says) in cases {
        let e = err(&format!("{MINIMAL}{section}: {value}\n"));
        assert_eq!(&e.field, field, "{e}");
        assert!(e.message.contains(says), "{e}");
    }
}

/// `MINIMAL` followed by `extra` (which starts at line 9) must be rejected at `field`, `line`.
fn rejected_at(extra: &str, field: &str, line: usize) -> ConfigError {
    let e = err(&format!("{MINIMAL}{extra}"));
    assert_eq!(
        (e.field.as_str(), e.line),
        (field, Some(line)),
        "{extra}: {e}"
    );
    e
}

fn accepted(extra: &str) -> Config {
    Config::parse(&format!("{MINIMAL}{extra}")).unwrap_or_else(|e| panic!("{extra}: {e}"))
}

/// The core's rule (spill only to a replica with at most `1 / spill_factor` of the wait) makes
/// a factor below 1 a guard that never fires; the router used to accept it.
#[test]
fn spill_factor_below_one_is_rejected_at_its_line() {
    let field = "scheduling.hotspot.spill_factor";
    let e = rejected_at(
        "scheduling:\n  hotspot:\n    max_wait_s: 0.5\n    spill_factor: 0.5\n",
        field,
        12,
    );
    assert!(e.message.contains("got 0.5"), "{e}");
    assert!(
        e.to_string()
            .starts_with(&format!("config:12: field `{field}`: ")),
        "{e}"
    );
    rejected_at(
        "scheduling:\n  hotspot: { max_wait_s: 0.5, spill_factor: 0.5 }\n",
        field,
        10,
    );
    accepted("scheduling:\n  hotspot:\n    spill_factor: 1\n");
}

/// A leave factor below 1 would move requests off a pick that is the cheapest; `.inf` (YAML's
/// infinity) turns the rule off.
#[test]
fn leave_factor_below_one_is_rejected_and_inf_is_off() {
    let field = "scheduling.placement.leave_factor";
    let e = rejected_at(
        "scheduling:\n  placement:\n    leave_factor: 0.9\n",
        field,
        11,
    );
    assert!(e.message.contains("got 0.9"), "{e}");
    let c = accepted("scheduling:\n  placement:\n    leave_factor: .inf\n");
    assert_eq!(c.scheduling.placement.leave_factor, f64::INFINITY);
    assert_eq!(accepted("").scheduling.placement.leave_factor, 2.0);
}

/// All-zero weights make every weighted score 0 (ties at random) under `policy: prefix`, the
/// only policy that reads them; the router used to accept them.
#[test]
fn all_zero_weights_are_rejected_where_the_policy_uses_them() {
    let zero = "  weights:\n    prefix: 0\n    load: 0\n    queue: 0\n    kv_cache: 0\n";
    let e = rejected_at(
        &format!("scheduling:\n  policy: prefix\n{zero}"),
        "scheduling.weights",
        11,
    );
    assert!(e.message.contains("at least one scheduler weight"), "{e}");
    // `prefix` is the default policy: the same weights without a policy are rejected too.
    rejected_at(&format!("scheduling:\n{zero}"), "scheduling.weights", 10);
    for policy in ["round_robin", "least_load", "predicted_ttft"] {
        let c = accepted(&format!("scheduling:\n  policy: {policy}\n{zero}"));
        assert_eq!(c.scheduling.weights.prefix, 0.0);
    }
}

/// The core documents `max_wait_s: inf` as turning the hot-spot guard off; the router used to
/// reject it as not finite.
#[test]
fn infinite_max_wait_turns_the_guard_off_and_is_accepted() {
    let c = accepted("scheduling:\n  hotspot:\n    max_wait_s: .inf\n");
    assert_eq!(c.scheduling.hotspot.max_wait_s, f64::INFINITY);
    for bad in ["-1", ".nan", "-.inf"] {
        let extra = format!("scheduling:\n  hotspot:\n    max_wait_s: {bad}\n");
        rejected_at(&extra, "scheduling.hotspot.max_wait_s", 11);
    }
}

#[test]
fn predictor_is_the_cores_prior_with_its_checks() {
    let c = accepted("predictor:\n  per_token_s: 0.0001\n");
    let want = TtftPrior {
        per_token_s: 0.0001,
        ..TtftPrior::default()
    };
    assert_eq!(c.predictor, want);
    assert_eq!(accepted("").predictor, TtftPrior::default());
    rejected_at(
        "predictor:\n  base_s: 0.01\n  per_queued_s: -1\n",
        "predictor.per_queued_s",
        11,
    );
    let e = rejected_at("predictor:\n  per_tokens_s: 1\n", "predictor", 10);
    assert!(e.message.contains("unknown field `per_tokens_s`"), "{e}");
}

#[test]
fn block_bytes_range_is_the_cores() {
    use warmpath_routing::prompt::{MAX_BLOCK_BYTES, MIN_BLOCK_BYTES};
    for ok in [MIN_BLOCK_BYTES, MAX_BLOCK_BYTES] {
        accepted(&format!("index:\n  block_bytes: {ok}\n"));
    }
    for bad in [0, MIN_BLOCK_BYTES - 1, MAX_BLOCK_BYTES + 1] {
        let e = rejected_at(
            &format!("index:\n  block_bytes: {bad}\n"),
            "index.block_bytes",
            10,
        );
        assert!(e.message.contains(&format!("got {bad}")), "{e}");
    }
}

#[test]
fn scheduling_policy_is_checked_by_serde() {
    let e = err(&format!("{MINIMAL}scheduling:\n  policy: fastest\n"));
    assert_eq!(e.field, "scheduling.policy", "{e}");
    assert_eq!(e.line, Some(10));
}

/// The peer baselines are selected by name; their knobs default when absent, and the core's
/// checks of them are reported at their field and line.
#[test]
fn peer_baseline_policies_parse_and_bad_knobs_are_located() {
    use warmpath_routing::scheduler::{ConsistentHash, Dynamo, LlmD, Policy};
    for (name, policy) in [
        ("consistent_hash", Policy::ConsistentHash),
        ("llm_d", Policy::LlmD),
        ("dynamo", Policy::Dynamo),
    ] {
        let c = accepted(&format!("scheduling:\n  policy: {name}\n"));
        assert_eq!(c.scheduling.policy, policy);
        assert_eq!(c.scheduling.consistent_hash, ConsistentHash::default());
        assert_eq!(c.scheduling.llm_d, LlmD::default());
        assert_eq!(c.scheduling.dynamo, Dynamo::default());
    }
    let c = accepted(
        "scheduling:\n  policy: consistent_hash\n  consistent_hash:\n    prefix_blocks: 8\n    \
         epsilon: 0.5\n    virtual_nodes: 160\n  llm_d: { queue: 1 }\n  dynamo:\n    \
         overlap_score_weight: 2\n",
    );
    let s = &c.scheduling;
    let want = ConsistentHash {
        prefix_blocks: 8,
        epsilon: 0.5,
        virtual_nodes: 160,
    };
    assert_eq!(s.consistent_hash, want);
    assert_eq!((s.llm_d.queue, s.llm_d.prefix), (1.0, 3.0));
    assert_eq!(s.dynamo.overlap_score_weight, 2.0);
    let e = rejected_at(
        "scheduling:\n  policy: consistent_hash\n  consistent_hash:\n    epsilon: -0.5\n",
        "scheduling.consistent_hash.epsilon",
        12,
    );
    assert!(e.message.contains("got -0.5"), "{e}");
    rejected_at(
        "scheduling:\n  consistent_hash:\n    virtual_nodes: 0\n",
        "scheduling.consistent_hash.virtual_nodes",
        11,
    );
    rejected_at(
        "scheduling:\n  dynamo: { overlap_score_weight: .nan }\n",
        "scheduling.dynamo.overlap_score_weight",
        10,
    );
    let e = rejected_at(
        "scheduling:\n  policy: llm_d\n  llm_d:\n    prefix: 0\n    queue: 0\n    kv_cache: 0\n",
        "scheduling.llm_d",
        11,
    );
    assert!(e.message.contains("at least one"), "{e}");
    let e = err(&format!(
        "{MINIMAL}scheduling:\n  dynamo:\n    temperature: 0\n"
    ));
    assert_eq!(e.field, "scheduling.dynamo", "{e}");
    assert!(e.message.contains("unknown field `temperature`"), "{e}");
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
    // A key whose value is a block mapping or sequence is found at its own line.
    assert_eq!(locate::line_of(text, &p.key("a").key("d")), Some(3));
    assert_eq!(locate::line_of(text, &p.key("a")), Some(1));
    // Keys that are not strings are skipped, whatever their shape.
    let odd = "1: x\n? [k]\n: y\n? {k: v}\n: z\nb: 2\n";
    assert_eq!(locate::line_of(odd, &p.key("b")), Some(6));
    assert_eq!(locate::line_of(odd, &p.key("k")), None);
}

#[test]
fn the_example_documents_tenants_and_flow() {
    let c = Config::parse(include_str!("../../../examples/static.yaml")).unwrap();
    assert!(c.flow.enabled);
    assert_eq!(c.tenants.policies.len(), 2);
    assert_eq!(c.tenants.policies[1].header_value(), "batch-jobs");
    assert!(c.tenants.policies[1].is_sheddable());
    assert_eq!(
        c.tenants.policies[1].limits.tokens_per_second,
        Some(200000.0)
    );
    assert_eq!(c.flow.queue, warmpath_flow::FlowQueueConfig::default());
    let defaults = Config::parse("pools: []\n").unwrap();
    assert!(!defaults.flow.enabled, "queueing is opt-in");
    assert_eq!(
        defaults.tenants.trusted_sources, c.tenants.trusted_sources,
        "the example shows the default trust"
    );
}

#[test]
fn tenant_and_flow_errors_name_the_field() {
    let base = "pools: []\n";
    let cases = [
        ("tenants:\n  policies:\n    - { name: a, weight: 0 }\n", "tenants.policies[0].weight"),
        ("tenants:\n  policies:\n    - { name: a }\n    - { name: a }\n", "tenants.policies[1].name"),
        ("tenants:\n  policies:\n    - { name: a, api_keys: [short] }\n", "tenants.policies[0].api_keys[0]"),
        ("tenants:\n  policies:\n    - { name: a, api_keys: [sk-0123456789] }\n    - { name: b, api_keys: [sk-0123456789] }\n", "tenants.policies[1].api_keys[0]"),
        ("tenants:\n  policies:\n    - { name: a, limits: { burst: 3 } }\n", "tenants.policies[0].limits.burst"),
        ("tenants:\n  policies:\n    - { name: \"has space\" }\n", "tenants.policies[0].name"),
        ("tenants:\n  headers: [\"bad header\"]\n", "tenants.headers[0]"),
        ("tenants:\n  default: { name: d, api_keys: [sk-0123456789] }\n", "tenants.default.api_keys"),
        ("flow:\n  queue: { max_entries: 0 }\n", "flow.queue.max_entries"),
        ("flow:\n  saturation: { max_kv_usage: 1.5 }\n", "flow.saturation.max_kv_usage"),
        ("flow:\n  saturation: { max_inflight_requests: 0 }\n", "flow.saturation.max_inflight_requests"),
    ];
    for (yaml, field) in cases {
        let e = err(&format!("{base}{yaml}"));
        assert_eq!(e.field, field, "{yaml}: {e}");
        assert!(
            !e.to_string().contains("sk-0123456789"),
            "a key is printed: {e}"
        );
    }
    // A CIDR that is not one is refused by serde, at its line.
    let e = err("pools: []\ntenants:\n  trusted_sources: [10.0.0.0/33]\n");
    assert!(e.to_string().contains("trusted_sources"), "{e}");
}

#[test]
fn api_keys_come_from_a_file_too() {
    let dir = std::env::temp_dir().join(format!("warmpath-keys-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("keys");
    std::fs::write(
        &file,
        "# team keys\nsk-file-key-0001\n\n  sk-file-key-0002  \n",
    )
    .unwrap();
    let yaml = format!(
        "pools: []\ntenants:\n  policies:\n    - {{ name: a, api_keys: [sk-inline-0001], api_keys_file: {} }}\n",
        file.display()
    );
    let c = Config::parse(&yaml).unwrap();
    assert_eq!(
        c.tenants.policies[0].api_keys,
        ["sk-inline-0001", "sk-file-key-0001", "sk-file-key-0002"]
    );
    let missing = err(
        "pools: []\ntenants:\n  policies:\n    - { name: a, api_keys_file: /nonexistent/keys }\n",
    );
    assert_eq!(missing.field, "tenants.policies[0].api_keys_file");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_pool_may_have_its_own_weights_checked_by_the_core() {
    let base = "pools:\n  - name: a\n    models: [m]\n    replicas: [{ name: r0, url: \"http://127.0.0.1:1\" }]\n";
    let own = format!("{base}    weights: {{ prefix: 5, load: 1, queue: 0, kv_cache: 0 }}\n");
    let c = Config::parse(&own).unwrap();
    assert_eq!(c.pools[0].weights.unwrap().prefix, 5.0);
    let bad = format!("{base}    weights: {{ prefix: -1 }}\n");
    assert_eq!(err(&bad).field, "pools[0].weights.prefix");
}

/// A reload names exactly the settings it cannot apply; settings it applies are not named.
#[test]
fn start_only_settings_changed_are_named() {
    let base = "pools:\n  - name: p\n    models: [m]\n    replicas: [{name: a, url: 'http://127.0.0.1:1'}]\n";
    let started = Config::parse(base).unwrap().start_only();
    let applied = Config::parse(&format!(
        "{base}scheduling: {{ weights: {{ prefix: 1 }} }}\n"
    ))
    .unwrap()
    .start_only();
    assert!(started.changed(&applied).is_empty());
    let restart = Config::parse(&format!(
        "{base}limits: {{ max_connections: 7 }}\nsessions: {{ max_sessions: 9 }}\n"
    ))
    .unwrap()
    .start_only();
    assert_eq!(
        started.changed(&restart),
        ["sessions.max_sessions", "limits.max_connections"]
    );
}

#[test]
fn a_pools_failure_mode_wins_for_its_models_and_closed_wins_a_disagreement() {
    let c = Config::parse(
        "endpoint_picker: { failure_mode: open }\npools:\n  - { name: a, models: [m, n], failure_mode: closed, replicas: [{ name: a0, url: \"http://10.0.0.1:8000\" }] }\n  - { name: b, models: [n, o], failure_mode: open, replicas: [{ name: b0, url: \"http://10.0.0.2:8000\" }] }\n  - { name: c, models: [o, p], replicas: [{ name: c0, url: \"http://10.0.0.3:8000\" }] }\n",
    )
    .unwrap();
    assert_eq!(c.failure_mode_for("m"), FailureMode::Closed);
    assert_eq!(c.failure_mode_for("n"), FailureMode::Closed, "closed wins");
    assert_eq!(c.failure_mode_for("o"), FailureMode::Open);
    assert_eq!(c.failure_mode_for("p"), FailureMode::Open, "the picker's");
    assert_eq!(
        c.failure_mode_for("nope"),
        FailureMode::Open,
        "the picker's"
    );
}

#[test]
fn objectives_are_checked() {
    let c = Config::parse(include_str!("../../../examples/static.yaml")).unwrap();
    assert_eq!(c.objectives.len(), 2);
    assert_eq!(
        (c.objectives[0].name.as_str(), c.objectives[0].priority),
        ("chat", 10)
    );
    let ok = Config::parse(
        "pools: []\nobjectives:\n  - { name: a, priority: 3, models: [m] }\n  - { name: a, models: [n] }\n  - { name: a, priority: -5 }\n",
    )
    .unwrap();
    assert_eq!(ok.objectives[1].priority, 0, "llm-d's default priority");
    let e = err("pools: []\nobjectives:\n  - { name: a, priority: 1001 }\n");
    assert_eq!(e.field, "objectives[0].priority");
    assert_eq!(e.line, Some(3));
    let e = err("pools: []\nobjectives:\n  - { name: 'a b' }\n");
    assert_eq!(e.field, "objectives[0].name");
    let e = err("pools: []\nobjectives:\n  - { name: a }\n  - { name: a }\n");
    assert_eq!(e.field, "objectives[1].name");
    assert!(e.message.contains("every model"), "{}", e.message);
    let e = err(
        "pools: []\nobjectives:\n  - { name: a, models: [m] }\n  - { name: a, models: [n, m] }\n",
    );
    assert_eq!(e.field, "objectives[1].models[1]");
    let many: String = (0..=MAX_OBJECTIVES)
        .map(|i| format!("  - {{ name: o{i} }}\n"))
        .collect();
    assert_eq!(
        err(&format!("pools: []\nobjectives:\n{many}")).field,
        "objectives"
    );
}

#[test]
fn peers_endpoints_and_bounds_are_checked() {
    let c = Config::parse(&format!(
        "{MINIMAL}peers: {{ listen: \"tcp://0.0.0.0:5570\", routers: [\"tcp://router-peers.ns.svc:5570\"] }}\n"
    ))
    .unwrap();
    assert_eq!(c.peers.listen.as_deref(), Some("tcp://0.0.0.0:5570"));
    assert_eq!(c.peers.queue, PeersConfig::default().queue);
    assert_eq!(Config::parse(MINIMAL).unwrap().peers.listen, None);
    section_rejects(
        "peers",
        &[
            ("{ listen: \"udp://0.0.0.0:1\" }", "peers.listen", "tcp://"),
            (
                "{ routers: [\"tcp://a:1\", \"tcp://b\"] }",
                "peers.routers[1]",
                "HOST:PORT",
            ),
            (
                "{ listen: \"tcp://0.0.0.0:1\", queue: 0 }",
                "peers.queue",
                "> 0",
            ),
            ("{ max_remembered: 0 }", "peers.max_remembered", "> 0"),
            ("{ resolve_every_ms: 0 }", "peers.resolve_every_ms", "> 0"),
        ],
    );
}

/// `peers.listen`'s `${NAME}` references, read from `env` (a test's own map) when parsed.
#[test]
fn peers_listen_expands_environment_variables() {
    let env = |name: &str| {
        [
            ("WARMPATH_TEST_POD_IP", "10.1.2.3"),
            ("WARMPATH_TEST_POD_IP6", "fd00::1"),
            ("WARMPATH_TEST_EMPTY", ""),
            ("_PORT9", "5570"),
        ]
        .into_iter()
        .find(|(n, _)| *n == name)
        .map(|(_, v)| v.to_owned())
    };
    let parse = |listen: &str| {
        Config::parse_with_env(&format!("{MINIMAL}peers:\n  listen: \"{listen}\"\n"), env)
    };
    let listen = |template: &str| {
        parse(template)
            .unwrap_or_else(|e| panic!("{template}: {e}"))
            .peers
            .listen
            .unwrap()
    };
    assert_eq!(
        listen("tcp://${WARMPATH_TEST_POD_IP}:5570"),
        "tcp://10.1.2.3:5570"
    );
    assert_eq!(listen("tcp://0.0.0.0:5570"), "tcp://0.0.0.0:5570");
    assert_eq!(
        listen("tcp://${WARMPATH_TEST_POD_IP}:${_PORT9}"),
        "tcp://10.1.2.3:5570"
    );
    // An IPv6 pod address is the host in brackets, as endpoints (and the ZMTP socket) want it;
    // already bracketed, it is left as written.
    assert_eq!(
        listen("tcp://${WARMPATH_TEST_POD_IP6}:5570"),
        "tcp://[fd00::1]:5570"
    );
    assert_eq!(
        listen("tcp://[${WARMPATH_TEST_POD_IP6}]:5570"),
        "tcp://[fd00::1]:5570"
    );
    // Only `${NAME}`: a lone `$` stays (and is then the endpoint's problem).
    assert!(parse("tcp://$WARMPATH_TEST_POD_IP:5570").is_ok());
    // The expanded endpoint is what is kept, so a reload of the same file compares equal.
    let text = format!("{MINIMAL}peers:\n  listen: tcp://${{WARMPATH_TEST_POD_IP}}:5570\n");
    let (a, b) = (
        Config::parse_with_env(&text, env).unwrap(),
        Config::parse_with_env(&text, env).unwrap(),
    );
    assert!(a.start_only().changed(&b.start_only()).is_empty());
    assert_eq!(a.peers, b.peers);
    for (template, says) in [
        (
            "tcp://${WARMPATH_TEST_UNSET}:5570",
            "environment variable `WARMPATH_TEST_UNSET` is not set",
        ),
        (
            "tcp://${WARMPATH_TEST_EMPTY}:5570",
            "environment variable `WARMPATH_TEST_EMPTY` is not set (or is empty)",
        ),
        (
            "tcp://${WARMPATH_TEST_POD_IP:5570",
            "without its closing `}`",
        ),
        (
            "tcp://${}:5570",
            "`${}` does not name an environment variable",
        ),
        ("tcp://${9X}:5570", "`${9X}` does not name"),
        ("tcp://${POD-IP}:5570", "`${POD-IP}` does not name"),
        // Expanded, the endpoint is still checked.
        ("udp://${WARMPATH_TEST_POD_IP}:5570", "only tcp://"),
    ] {
        let e = parse(template).expect_err(template);
        assert_eq!(
            (e.field.as_str(), e.line),
            ("peers.listen", Some(10)),
            "{e}"
        );
        assert!(e.message.contains(says), "{template}: {e}");
    }
    // `Config::parse` reads the process's environment (a name no one sets).
    let e = err(&format!(
        "{MINIMAL}peers: {{ listen: \"tcp://${{WARMPATH_TEST_NEVER_SET_4F2A}}:5570\" }}\n"
    ));
    assert_eq!(e.field, "peers.listen", "{e}");
    assert!(e.message.contains("WARMPATH_TEST_NEVER_SET_4F2A"), "{e}");
    // Only `listen` is expanded: a reference elsewhere is refused, not kept as a host name.
    let e = err(&format!(
        "{MINIMAL}peers: {{ routers: [\"tcp://${{WARMPATH_TEST_POD_IP}}:5570\"] }}\n"
    ));
    assert_eq!(e.field, "peers.routers[0]", "{e}");
    assert!(e.message.contains("only in `peers.listen`"), "{e}");
}

#[test]
fn lora_adapters_must_be_models_of_their_pool() {
    let with = |adapters: &str| {
        MINIMAL.replace(
            "    models: [m]\n",
            &format!("    models: [m, m-sql]\n    lora_adapters: {adapters}\n"),
        )
    };
    let c = Config::parse(&with("[m-sql]")).unwrap();
    assert_eq!(c.pools[0].lora_adapters, ["m-sql"]);
    assert!(Config::parse(MINIMAL).unwrap().pools[0]
        .lora_adapters
        .is_empty());
    let e = err(&with("[m-sql, other]"));
    assert_eq!(e.field, "pools[0].lora_adapters[1]", "{e}");
    assert!(e.message.contains("not one of the pool's `models`"), "{e}");
}

#[test]
fn the_failure_share_rule_is_checked() {
    let c = Config::parse(MINIMAL).unwrap();
    assert_eq!(
        (c.health.failure_percent, c.health.failure_window),
        (50, 20)
    );
    section_rejects(
        "health",
        &[
            (
                "{ failure_percent: 101 }",
                "health.failure_percent",
                "0-100",
            ),
            ("{ failure_window: 1 }", "health.failure_window", "2-64"),
            ("{ failure_window: 65 }", "health.failure_window", "2-64"),
        ],
    );
}
