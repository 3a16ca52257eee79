//! Each layer of the stack tested alone: the layer under test around a `tower_test` mock (or the
//! real next stage where it is pure), with a routing table built from configuration text and
//! no sockets.

use super::admission::{AdmissionLayer, Admit, Permit};
use super::choose::ChooseLayer;
use super::forward::UpstreamError;
use super::parse::ParseLayer;
use super::passive_health::PassiveHealthLayer;
use super::retry::RetryLayer;
use super::*;
use crate::config::Config;
use crate::errors::full_body;
use crate::state::index::RouterIndex;
use crate::state::replica::ReplicaRegistry;
use http::StatusCode;
use tower::{Layer, ServiceExt};
use tower_test::mock;
use warmpath_routing::index::PrefixIndex;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A table with one pool serving `tiny` from `n` replicas (nothing listens; nothing is sent).
fn table(n: usize) -> Arc<Table> {
    let mut yaml = String::from(
        "listen: 127.0.0.1:0\nadmin: 127.0.0.1:0\npools:\n  - name: p\n    models: [tiny]\n    metrics_path: null\n    replicas:\n",
    );
    for i in 0..n {
        yaml.push_str(&format!(
            "      - {{ name: r{i}, url: \"http://127.0.0.1:{}\" }}\n",
            i + 1
        ));
    }
    let config = Config::parse(&yaml).expect("valid test config");
    let mut registry = ReplicaRegistry::default();
    registry.sync(&config);
    Arc::new(Table::build(Arc::new(config), &registry, &Metrics::new()))
}

fn read(table: &Arc<Table>, body: &str) -> Read {
    let (head, ()) = Request::post("/v1/completions")
        .body(())
        .unwrap()
        .into_parts();
    Read {
        ctx: Ctx {
            request_id: HeaderValue::from_static("t-1"),
            started: Instant::now(),
            table: table.clone(),
            endpoint: Endpoint::Completions,
        },
        head,
        body: Bytes::from(body.to_owned()),
    }
}

fn admitted(table: &Arc<Table>) -> Admitted {
    let read = read(table, r#"{"model":"tiny","prompt":"hello there"}"#);
    let features =
        crate::request::parse(Endpoint::Completions, &read.body, &table.hasher, |_| None).unwrap();
    Admitted {
        parsed: Parsed { read, features },
        permit: Permit::default(),
        tenant: table.tenants.default_tenant().clone(),
    }
}

fn ok() -> Response<RespBody> {
    Response::new(full_body("ok"))
}

/// A mock whose errors are the stage's own error type (boxed, as the stages below a layer
/// hand it a movable future).
fn typed<Req, E: std::error::Error + Send + Sync + 'static>(
    mock: mock::Mock<Req, Response<RespBody>>,
) -> tower::util::BoxCloneService<Req, Response<RespBody>, E>
where
    Req: Send + 'static,
{
    tower::util::BoxCloneService::new(
        mock.map_err(|e: BoxError| *e.downcast::<E>().expect("the stage's error type")),
    )
}

fn refused(replica: ReplicaId) -> AttemptError {
    AttemptError::Refused {
        replica,
        error: ApiError::upstream_connect(&format!("r{replica}"), "refused"),
    }
}

/// One request through a retry layer of `attempts` tries, whose tries are answered with
/// `replies` in turn. Returns the answer, the exclusions each try carried, and whether the
/// layer asked for another try after the replies ran out.
async fn retry_run(
    attempts: usize,
    replies: Vec<Result<Response<RespBody>, AttemptError>>,
) -> (
    Result<Response<RespBody>, ApiError>,
    Vec<Vec<ReplicaId>>,
    bool,
) {
    let layer = RetryLayer::new(attempts, Arc::new(Metrics::new()));
    retry_run_with(layer, replies).await
}

async fn retry_run_with(
    layer: RetryLayer,
    replies: Vec<Result<Response<RespBody>, AttemptError>>,
) -> (
    Result<Response<RespBody>, ApiError>,
    Vec<Vec<ReplicaId>>,
    bool,
) {
    let (inner, mut handle) = mock::pair::<Attempt, Response<RespBody>>();
    let svc = layer.layer(typed::<_, AttemptError>(inner));
    let answer = tokio::spawn(svc.oneshot(admitted(&table(3))));
    let mut excluded = Vec::new();
    for reply in replies {
        let (attempt, send) = handle.next_request().await.expect("a try");
        excluded.push(attempt.exclude.clone());
        match reply {
            Ok(resp) => send.send_response(resp),
            Err(e) => send.send_error(e),
        }
    }
    let answer = answer.await.unwrap();
    (answer, excluded, handle.next_request().await.is_some())
}

#[tokio::test]
async fn retry_sends_a_refused_request_elsewhere_once() {
    let (answer, excluded, more) = retry_run(2, vec![Err(refused(0)), Ok(ok())]).await;
    assert_eq!(answer.unwrap().status(), StatusCode::OK);
    assert_eq!(excluded, vec![vec![], vec![0]]);
    assert!(!more);
}

#[tokio::test]
async fn retry_stops_at_its_budget_and_reports_the_refusal_over_no_replica() {
    // Both tries refused: the last refusal is the answer, and there is no third try.
    let (answer, _, more) = retry_run(2, vec![Err(refused(0)), Err(refused(1))]).await;
    let e = answer.unwrap_err();
    assert_eq!(
        (e.status, e.code),
        (StatusCode::BAD_GATEWAY, "upstream_connect_error")
    );
    assert!(e.message.contains("r1"), "{e}");
    assert!(!more);

    // Refused, then no replica left: the refusal says more than "no ready replica".
    let no_replica = AttemptError::NoReplica(ApiError::no_ready_replica("tiny"));
    let (answer, _, _) = retry_run(2, vec![Err(refused(0)), Err(no_replica)]).await;
    assert_eq!(answer.unwrap_err().code, "upstream_connect_error");
}

fn unavailable(replica: ReplicaId, status: StatusCode) -> AttemptError {
    let mut response = Response::new(crate::errors::full_body("{\"error\":\"busy\"}"));
    *response.status_mut() = status;
    AttemptError::Unavailable {
        replica,
        name: format!("r{replica}"),
        status,
        response: Box::new(std::sync::Mutex::new(response)),
    }
}

#[tokio::test]
async fn a_502_or_503_answer_is_tried_elsewhere_and_passed_on_when_nothing_is_left() {
    let (answer, excluded, more) = retry_run(
        2,
        vec![
            Err(unavailable(0, StatusCode::SERVICE_UNAVAILABLE)),
            Ok(ok()),
        ],
    )
    .await;
    assert_eq!(answer.unwrap().status(), StatusCode::OK);
    assert_eq!(excluded, vec![vec![], vec![0]]);
    assert!(!more);
    // Every try answered 503: the last replica's own answer goes to the client.
    let (answer, _, more) = retry_run(
        2,
        vec![
            Err(unavailable(0, StatusCode::SERVICE_UNAVAILABLE)),
            Err(unavailable(1, StatusCode::BAD_GATEWAY)),
        ],
    )
    .await;
    let resp = answer.unwrap();
    assert_eq!(resp.status(), StatusCode::BAD_GATEWAY);
    let body = http_body_util::BodyExt::collect(resp.into_body())
        .await
        .unwrap()
        .to_bytes();
    assert_eq!(&body[..], b"{\"error\":\"busy\"}");
    assert!(!more);
    // 503, then no replica left: that engine's own answer, as it came.
    let no_replica = AttemptError::NoReplica(ApiError::no_ready_replica("tiny"));
    let (answer, _, _) = retry_run(
        3,
        vec![
            Err(unavailable(0, StatusCode::SERVICE_UNAVAILABLE)),
            Err(no_replica),
        ],
    )
    .await;
    let resp = answer.unwrap();
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    let body = http_body_util::BodyExt::collect(resp.into_body())
        .await
        .unwrap()
        .to_bytes();
    assert_eq!(&body[..], b"{\"error\":\"busy\"}");
    // 503, then refused, then no replica left: the refusal, the latest word.
    let no_replica = AttemptError::NoReplica(ApiError::no_ready_replica("tiny"));
    let (answer, _, _) = retry_run(
        3,
        vec![
            Err(unavailable(0, StatusCode::SERVICE_UNAVAILABLE)),
            Err(refused(1)),
            Err(no_replica),
        ],
    )
    .await;
    assert_eq!(answer.unwrap_err().code, "upstream_connect_error");
}

#[tokio::test]
async fn retries_stop_when_the_budget_is_spent() {
    // A budget that allows nothing: the first answer is final, and the metric says why.
    let metrics = Arc::new(Metrics::new());
    let empty = tower::retry::budget::TpsBudget::new(std::time::Duration::from_secs(1), 0, 0.0);
    let layer = RetryLayer::with_budget(3, empty, metrics.clone());
    let (answer, _, more) = retry_run_with(layer, vec![Err(refused(0))]).await;
    assert_eq!(answer.unwrap_err().code, "upstream_connect_error");
    assert!(!more, "no retry without budget");
    let text = metrics.encode();
    assert!(
        text.contains("warmpath_retries_total{reason=\"budget_exhausted\"} 1"),
        "{text}"
    );
}

#[tokio::test]
async fn a_connection_broken_before_the_head_is_tried_elsewhere() {
    let reset = AttemptError::Reset {
        replica: 1,
        error: ApiError::upstream_failed("r1", "connection closed before message completed"),
    };
    let metrics = Arc::new(Metrics::new());
    let layer = RetryLayer::new(3, metrics.clone());
    let (answer, excluded, more) = retry_run_with(layer, vec![Err(reset), Ok(ok())]).await;
    assert_eq!(answer.unwrap().status(), StatusCode::OK);
    assert_eq!(excluded, vec![vec![], vec![1]]);
    assert!(!more);
    let text = metrics.encode();
    assert!(
        text.contains("warmpath_retries_total{reason=\"reset\"} 1"),
        "{text}"
    );
}

#[tokio::test]
async fn retry_never_repeats_what_may_have_reached_a_replica() {
    let timeout = AttemptError::Failed(ApiError::upstream_timeout("r0"));
    let (answer, _, more) = retry_run(5, vec![Err(timeout)]).await;
    assert_eq!(answer.unwrap_err().status, StatusCode::GATEWAY_TIMEOUT);
    assert!(!more, "no second try");
}

struct Counted;
impl admission::Held for Counted {}

struct Fixed(fn() -> Admit);
impl Admission for Fixed {
    fn admit(&self, _: &admission::AdmissionRequest<'_>) -> Admit {
        (self.0)()
    }
}

fn parsed(table: &Arc<Table>) -> Parsed {
    admitted(table).parsed
}

#[tokio::test]
async fn admission_refusals_never_reach_the_next_stage() {
    let (inner, mut handle) = mock::pair::<Admitted, Response<RespBody>>();
    let layer = AdmissionLayer::new(Arc::new(Fixed(|| {
        Admit::Reject(ApiError::over_limit("tenant over its share", 3))
    })));
    let e = layer
        .layer(typed::<_, ApiError>(inner))
        .oneshot(parsed(&table(1)))
        .await
        .unwrap_err();
    assert_eq!(
        (e.status, e.retry_after),
        (StatusCode::TOO_MANY_REQUESTS, Some(3))
    );
    drop(layer);
    assert!(handle.next_request().await.is_none());
}

#[tokio::test(start_paused = true)]
async fn admission_may_hold_a_request_until_its_permit_comes() {
    let (inner, mut handle) = mock::pair::<Admitted, Response<RespBody>>();
    let layer = AdmissionLayer::new(Arc::new(Fixed(|| {
        Admit::Later(Box::pin(async {
            tokio::time::sleep(std::time::Duration::from_secs(2)).await;
            Ok(Permit(Some(Arc::new(Counted))))
        }))
    })));
    let started = tokio::time::Instant::now();
    let answer = tokio::spawn(
        layer
            .layer(typed::<_, ApiError>(inner))
            .oneshot(parsed(&table(1))),
    );
    let (admitted, reply) = handle.next_request().await.unwrap();
    assert_eq!(started.elapsed(), std::time::Duration::from_secs(2));
    assert!(
        admitted.permit.0.is_some(),
        "the permit travels with the request"
    );
    reply.send_response(ok());
    assert_eq!(answer.await.unwrap().unwrap().status(), StatusCode::OK);
}

#[tokio::test]
async fn parse_labels_failures_by_model_and_refuses_unserved_models() {
    let t = table(1);
    let (inner, mut handle) = mock::pair::<Parsed, Response<RespBody>>();
    let pool = Arc::new(super::tokenize::TokenizePool::new(
        1,
        1,
        Arc::new(Metrics::new()),
    ));
    let svc = ParseLayer::new(pool).layer(typed::<_, ApiError>(inner));
    let r = svc
        .clone()
        .oneshot(read(&t, r#"{"model":"other","prompt":"x"}"#))
        .await
        .unwrap_err();
    assert_eq!(
        (r.error.status, r.model.as_str()),
        (StatusCode::NOT_FOUND, "(unknown)")
    );
    let r = svc
        .clone()
        .oneshot(read(&t, "{not json"))
        .await
        .unwrap_err();
    assert_eq!(
        (r.error.status, r.model.as_str()),
        (StatusCode::BAD_REQUEST, "")
    );
    let answer = tokio::spawn(svc.oneshot(read(&t, r#"{"model":"tiny","prompt":"x"}"#)));
    let (p, reply) = handle.next_request().await.unwrap();
    assert_eq!(p.features.model, "tiny");
    reply.send_error(ApiError::no_ready_replica("tiny"));
    let r = answer.await.unwrap().unwrap_err();
    assert_eq!(
        (r.error.status, r.model.as_str()),
        (StatusCode::SERVICE_UNAVAILABLE, "tiny")
    );
}

/// The ids of the replicas serving `tiny`, in order.
fn replica_ids(t: &Table) -> Vec<ReplicaId> {
    let all = t.candidates("tiny").unwrap();
    all.iter().map(|c| c.replica.id).collect()
}

fn index() -> SharedIndex {
    Arc::new(parking_lot::Mutex::new(RouterIndex::approximate(1 << 20)))
}

#[tokio::test]
async fn choose_skips_excluded_replicas_and_says_when_none_is_left() {
    let t = table(2);
    let (inner, mut handle) = mock::pair::<Chosen, Response<RespBody>>();
    let metrics = Arc::new(Metrics::new());
    let svc = ChooseLayer::alone(index(), metrics.clone()).layer(typed::<_, AttemptError>(inner));
    let request = Arc::new(admitted(&t));
    let ids = replica_ids(&t);
    let answer = tokio::spawn(svc.clone().oneshot(Attempt {
        request: request.clone(),
        exclude: vec![ids[0]],
    }));
    let (chosen, reply) = handle.next_request().await.unwrap();
    assert_eq!(chosen.routed.candidate.replica.name, "r1");
    assert_eq!(chosen.routed.candidate.replica.inflight_requests(), 1);
    drop(chosen);
    reply.send_response(ok());
    answer.await.unwrap().unwrap();
    assert_eq!(
        t.candidates("tiny").unwrap()[1].replica.inflight_requests(),
        0
    );
    assert!(
        metrics
            .encode()
            .contains("warmpath_decision_duration_seconds_count 1\n"),
        "the decision is timed"
    );

    let e = svc
        .oneshot(Attempt {
            request,
            exclude: ids,
        })
        .await
        .unwrap_err();
    assert!(
        matches!(e, AttemptError::NoReplica(ref a) if a.status == StatusCode::SERVICE_UNAVAILABLE),
        "{e}"
    );
}

/// A completion prompt of `words` words, its own per `seed`.
fn words(seed: u32, words: u32) -> String {
    (0..words).map(|i| format!("w{seed}x{i} ")).collect()
}

#[test]
fn flow_control_prefill_rule_steers_prefills_away_from_a_replica_with_prefill_pending() {
    use crate::choice::{Choice, Indexes, PrefillRule};
    let t = table(2);
    let features = |prompt: &str| {
        let body = serde_json::json!({"model": "tiny", "prompt": prompt}).to_string();
        crate::request::parse(Endpoint::Completions, body.as_bytes(), &t.hasher, |_| None).unwrap()
    };
    let ids = replica_ids(&t);
    let go = |idx: &Indexes, prompt: &str, exclude: &[ReplicaId], prefill_rule: PrefillRule| {
        let features = features(prompt);
        Choice {
            exclude,
            prefill_rule,
            seed: 7,
            ..Choice::serving(idx, &t, &features).unwrap()
        }
        .choose()
        .unwrap()
    };
    // Each choice below starts from the same index: `shared` was served on r0, which holds the
    // prefix now (every choice records its prompt where it went). It is long enough that
    // waiting behind `big`'s prefill costs less than repeating it elsewhere (a short one would
    // leave r0 by itself: `leave_backed_up`).
    let shared = words(1, 1500);
    let fresh = || {
        let idx = Indexes::alone(index());
        drop(go(&idx, &shared, &ids[1..], PrefillRule::Any));
        idx
    };
    // `big`, another prompt, is in flight on r0 with its prefill still pending (guards held).
    let big = go(&fresh(), &words(3, 2400), &ids[1..], PrefillRule::Any);
    assert_eq!(big.candidate.replica.name, "r0");
    let pending = big.candidate.replica.pending_prefill_tokens();
    assert_eq!(pending, u64::from(big.uncached_tokens));
    let longer = format!("{shared}{}", words(2, 20));
    let to = |prefill_rule| {
        go(&fresh(), &longer, &[], prefill_rule)
            .candidate
            .replica
            .name
            .clone()
    };
    // Left to the scheduler, the longer prompt follows its prefix to r0, where its prefill
    // would share a step with all of `big`'s.
    assert_eq!(to(PrefillRule::Any), "r0");
    // A backlog's request goes where the pending prefill is under the bound; when none is,
    // anywhere (admission's pool bound keeps that rare).
    assert_eq!(to(PrefillRule::PrefillBelow(pending)), "r1");
    assert_eq!(to(PrefillRule::PrefillBelow(pending + 1)), "r0");
    let r1 = &t.candidates("tiny").unwrap()[1].replica;
    let also_pending = crate::state::replica::PrefillGuard::new(r1.clone(), pending);
    assert_eq!(
        to(PrefillRule::PrefillBelow(pending)),
        "r0",
        "no replica below the bound: the scheduler's choice"
    );
    drop(also_pending);
    // A light tenant's request goes where the least prefill is ahead of its first token:
    // r1's cold prefill of the whole prompt is less than `big` plus the suffix on r0.
    assert_eq!(to(PrefillRule::LeastPrefill), "r1");
    drop(big);
    // Nothing pending on r0 any more: its cached prefix makes it the lighter one.
    assert_eq!(to(PrefillRule::LeastPrefill), "r0");
}

#[tokio::test]
async fn passive_health_ejects_and_forgets_a_replica_that_refuses() {
    let t = table(1);
    let idx = index();
    let replica = t.candidates("tiny").unwrap()[0].replica.clone();
    let hashes = admitted(&t).features().prompt.hashes.clone();
    idx.lock().on_routed(replica.id, &hashes);
    let (inner, mut handle) = mock::pair::<Chosen, Response<RespBody>>();
    let metrics = Arc::new(Metrics::new());
    let stack = ChooseLayer::alone(idx.clone(), metrics.clone()).layer(
        PassiveHealthLayer::new(idx.clone(), metrics.clone())
            .layer(typed::<_, UpstreamError>(inner)),
    );
    let answer = tokio::spawn(stack.oneshot(Attempt {
        request: Arc::new(admitted(&t)),
        exclude: vec![],
    }));
    let (chosen, reply) = handle.next_request().await.unwrap();
    assert_eq!(chosen.routed.decision.matched_blocks as usize, hashes.len());
    reply.send_error(UpstreamError::Connect(
        std::io::ErrorKind::ConnectionRefused.into(),
    ));
    let e = answer.await.unwrap().unwrap_err();
    assert!(
        matches!(e, AttemptError::Refused { replica: id, .. } if id == replica.id),
        "{e}"
    );
    assert!(
        !replica.health.is_ready(std::time::Instant::now()),
        "ejected"
    );
    let mut matched = [0u32];
    idx.lock()
        .longest_prefix(&hashes, &[replica.id], &mut matched);
    assert_eq!(matched, [0], "its index entries are forgotten");
}

/// A table reader as the publisher hands it out, for stages that take one; the publisher is
/// returned to keep the channel open.
fn reader(
    n: usize,
) -> (
    crate::state::publish::TableReader,
    crate::state::publish::Publisher,
) {
    use crate::state::publish::{Publisher, Update};
    let t = table(n);
    let start_scraper: crate::state::publish::StartScraper =
        Box::new(|_, _| tokio::spawn(async {}).abort_handle());
    let (mut publisher, reader) =
        Publisher::new(&t.config, index(), Arc::new(Metrics::new()), start_scraper);
    publisher.apply(Update::File(Box::new((*t.config).clone())));
    (reader, publisher)
}

#[tokio::test]
async fn endpoints_answer_locally_and_turn_rejections_into_counted_answers() {
    use http_body_util::BodyExt;
    let (proxy, mut handle) = mock::pair::<Incoming<()>, Response<RespBody>>();
    let metrics = Arc::new(Metrics::new());
    let (tables, _publisher) = reader(2);
    let svc = endpoints::Endpoints::new(
        tables,
        Arc::new(DiscoveryStatus::new(true)),
        metrics.clone(),
        tower::util::BoxCloneService::new(
            typed::<_, RejectionError>(proxy).map_err(|e: RejectionError| e.0),
        ),
    );
    let get = |path: &str| Request::get(path).body(()).unwrap();
    let models = svc.clone().oneshot(get("/v1/models")).await.unwrap();
    let body = models.into_body().collect().await.unwrap().to_bytes();
    assert!(std::str::from_utf8(&body).unwrap().contains("\"tiny\""));
    let health = svc.clone().oneshot(get("/health")).await.unwrap();
    assert_eq!(health.status(), StatusCode::OK);
    assert_eq!(
        svc.clone().oneshot(get("/nope")).await.unwrap().status(),
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        svc.clone()
            .oneshot(get("/v1/completions"))
            .await
            .unwrap()
            .status(),
        StatusCode::METHOD_NOT_ALLOWED
    );

    // A completion goes down the stack with its context; a rejection comes back as an answer.
    let post = Request::post("/v1/completions").body(()).unwrap();
    let answer = tokio::spawn(svc.oneshot(post));
    let (incoming, reply) = handle.next_request().await.unwrap();
    assert_eq!(incoming.ctx.endpoint, Endpoint::Completions);
    reply.send_error(RejectionError(Rejection {
        error: ApiError::no_ready_replica("tiny"),
        model: "tiny".into(),
    }));
    let resp = answer.await.unwrap().unwrap();
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(resp.headers()["retry-after"], "1");
    let text = metrics.encode();
    assert!(
        text.contains(r#"warmpath_requests_total{model="tiny",pool="",replica="",status="503"} 1"#),
        "{text}"
    );
}

/// `Rejection` as an error type, for the mock that stands in for the proxy stack.
#[derive(Debug)]
struct RejectionError(Rejection);
impl std::fmt::Display for RejectionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.error.fmt(f)
    }
}
impl std::error::Error for RejectionError {}

/// The approximate index keeps an adapter's and a salted prompt's blocks apart from the same
/// text's elsewhere, as the engine's cache does; the base model and its unsalted prompts share.
#[test]
fn adapters_and_salts_scope_the_approximate_hashes() {
    let config = Config::parse(
        "listen: 127.0.0.1:0\nadmin: 127.0.0.1:0\npools:\n  - name: p\n    models: [tiny, tiny-alias, tiny-sql]\n    lora_adapters: [tiny-sql]\n    metrics_path: null\n    replicas:\n      - { name: r0, url: \"http://127.0.0.1:1\" }\n",
    )
    .expect("valid test config");
    let mut registry = ReplicaRegistry::default();
    registry.sync(&config);
    let table = Table::build(Arc::new(config), &registry, &Metrics::new());
    let prompt = "a long shared prompt, long enough for several blocks of the index ".repeat(20);
    let hashes = |model: &str, salt: Option<&str>| {
        let mut body = serde_json::json!({"model": model, "prompt": prompt});
        if let Some(s) = salt {
            body["cache_salt"] = s.into();
        }
        let body = body.to_string();
        super::features::features(
            Endpoint::Completions,
            body.as_bytes(),
            &http::HeaderMap::new(),
            &table,
        )
        .map_err(|r| r.error)
        .expect("valid request")
        .prompt
        .hashes
    };
    let base = hashes("tiny", None);
    assert!(base.len() > 4);
    assert_eq!(
        hashes("tiny-alias", None),
        base,
        "served names of one model share"
    );
    let adapter = hashes("tiny-sql", None);
    let salted = hashes("tiny", Some("s1"));
    for (what, h) in [("adapter", &adapter), ("salt", &salted)] {
        assert_eq!(h.len(), base.len());
        assert!(
            h.iter().zip(&base).all(|(a, b)| a != b),
            "{what}: no block shared"
        );
    }
    assert_eq!(hashes("tiny", Some("s1")), salted, "one salt shares");
    assert_ne!(hashes("tiny", Some("s2")), salted);
    assert_ne!(hashes("tiny-sql", Some("s1")), adapter);
}
