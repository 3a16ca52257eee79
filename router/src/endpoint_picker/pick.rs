//! A request's pick, by the proxy's own stages: the body parsed by [`crate::request::parse`]
//! (the path says completions or chat), unknown models refused, the tenant identified and
//! admitted by the same [`Admission`] (flow control), then chosen for by the proxy's own
//! [`Chooser`] (the same indexes, counters, table, metrics and decision log). So a Gateway's
//! request goes where the proxy would have sent it.

use super::wire::{in_subset, Head};
use crate::api::admission::{Admission, AdmissionRequest, Permit};
use crate::choice::{Ask, Chooser, Routed};
use crate::metrics::{Metrics, RequestLabels};
use crate::request::{Endpoint, RequestFeatures};
use crate::state::publish::TableReader;
use crate::state::table::Table;
use crate::tenants::{Identity, Tenant};
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;
use warmpath_routing::ReplicaId;

pub use crate::api::admission::Admit;

/// What the picker shares with the proxy: the same state `start` gives the API stack.
#[derive(Clone)]
pub struct Parts {
    pub tables: TableReader,
    pub metrics: Arc<Metrics>,
    pub chooser: Arc<Chooser>,
    pub admission: Arc<dyn Admission>,
    pub tokenize: Arc<crate::api::tokenize::TokenizePool>,
}

/// The picker's routing core, one for all streams.
pub struct Core {
    pub parts: Parts,
    /// Turn of requests that are not inference requests (`/v1/models`): any ready replica.
    rotation: AtomicUsize,
}

/// A request the picker will not route, and the model label its metric carries: the proxy's
/// own rejection.
pub use crate::api::Rejection as Refusal;

/// A request parsed and identified, before admission.
pub struct Identified {
    pub table: Arc<Table>,
    pub features: RequestFeatures,
    pub tenant: Arc<Tenant>,
    /// The objective the request names (`x-llm-d-inference-objective`), known or not.
    pub objective: Option<String>,
    pub body_bytes: usize,
}

/// A request bound to a replica.
pub struct Picked {
    pub routed: Routed,
    pub permit: Permit,
    pub table: Arc<Table>,
    pub model: String,
    pub stream: bool,
    /// `IP:PORT` for the Gateway.
    pub endpoint: String,
}

/// Which OpenAI endpoint a request head is for: only POSTs to the completion endpoints are
/// routed, as in the proxy (`api::endpoints`).
pub fn endpoint(head: &Head) -> Option<Endpoint> {
    if head.method != "POST" {
        return None;
    }
    match head.path.as_str() {
        "/v1/completions" => Some(Endpoint::Completions),
        "/v1/chat/completions" => Some(Endpoint::ChatCompletions),
        _ => None,
    }
}

impl Core {
    pub fn new(parts: Parts) -> Self {
        Self {
            parts,
            rotation: AtomicUsize::new(0),
        }
    }

    /// The proxy's identity check, on the request head alone: as in the proxy, a request that
    /// proves no tenant is refused before its body is held, parsed or tokenized. The peer is the
    /// Gateway: its tenant headers count when `tenants.trusted_sources` names its addresses (a
    /// client's own key counts wherever it comes from).
    pub fn identify(&self, head: &Head, peer: Option<IpAddr>) -> Result<Identity, Refusal> {
        self.parts
            .tables
            .current()
            .tenants
            .identify(&head.headers, peer)
            .map_err(Refusal::before_parse)
    }

    /// The proxy's parse stage, on the body the Gateway buffered, for a request identified by
    /// [`Core::identify`].
    pub async fn parse(
        &self,
        endpoint: Endpoint,
        head: &Head,
        body: bytes::Bytes,
        peer: Option<IpAddr>,
        identity: Identity,
    ) -> Result<Identified, Refusal> {
        let table = self.parts.tables.current();
        let body_bytes = body.len();
        let features = self
            .parts
            .tokenize
            .features(endpoint, body, &head.headers, &table)
            .await?;
        let objective = table
            .tenants
            .objective(&head.headers, peer)
            .map(str::to_owned);
        Ok(Identified {
            table,
            features,
            tenant: identity.tenant,
            objective,
            body_bytes,
        })
    }

    /// The proxy's admission stage: flow control may answer at once, queue, or refuse.
    pub fn admit(&self, parsed: &Identified) -> Admit {
        let f = &parsed.features;
        self.parts.admission.admit(&AdmissionRequest {
            tenant: &parsed.tenant,
            model: &f.model,
            objective: parsed.objective.as_deref(),
            prompt_tokens: warmpath_routing::prompt::estimate_tokens(f.prompt.total_bytes),
            max_tokens: f.max_tokens,
            body_bytes: parsed.body_bytes,
            table: &parsed.table,
        })
    }

    /// The proxy's choice, among the replicas in the Gateway's `subset` when it sets one,
    /// counted and logged as the proxy's choose layer does.
    pub fn choose(
        &self,
        parsed: Identified,
        permit: Permit,
        head: &Head,
        subset: Option<&[String]>,
    ) -> Result<Picked, Refusal> {
        let Identified {
            table,
            features,
            tenant,
            ..
        } = parsed;
        let exclude: Vec<ReplicaId> = match (subset, table.candidates(&features.model)) {
            (Some(subset), Some(all)) => all
                .iter()
                .filter(|c| !in_subset(subset, &c.replica.authority))
                .map(|c| c.replica.id)
                .collect(),
            _ => Vec::new(),
        };
        let routed = self
            .parts
            .chooser
            .route(&Ask {
                table: &table,
                features: &features,
                exclude: &exclude,
                prefill_rule: permit.prefill_rule(),
                headers: &head.headers,
                request_id: head.headers.get("x-request-id"),
                tenant: &tenant.name,
            })
            .map_err(|error| Refusal {
                error,
                model: features.model.clone(),
            })?;
        permit.set_uncached_prompt(u64::from(routed.uncached_tokens));
        Ok(Picked {
            endpoint: routed.candidate.replica.authority.to_string(),
            routed,
            permit,
            table,
            stream: features.stream,
            model: features.model,
        })
    }

    /// A ready replica, in turn, for a request that is not an inference request (`/v1/models`,
    /// `/health`): the proxy answers those itself, a Gateway needs an endpoint that can.
    pub fn any(&self, subset: Option<&[String]>) -> Option<String> {
        let table = self.parts.tables.current();
        let now = Instant::now();
        let mut ready: Vec<&crate::state::table::Candidate> = Vec::new();
        for pool in table
            .config
            .pools
            .iter()
            .filter(|p| p.role != crate::config::Role::Prefill)
        {
            for model in &pool.models {
                for c in table.candidates(model).into_iter().flat_map(|c| c.iter()) {
                    let fits = subset.is_none_or(|s| in_subset(s, &c.replica.authority));
                    if fits
                        && c.replica.health.is_ready(now)
                        && !ready.iter().any(|r| r.replica.id == c.replica.id)
                    {
                        ready.push(c);
                    }
                }
            }
        }
        if ready.is_empty() {
            return None;
        }
        let turn = self.rotation.fetch_add(1, Ordering::Relaxed);
        Some(ready[turn % ready.len()].replica.authority.to_string())
    }

    /// Count a request answered with its refusal, as the proxy counts its error answers.
    pub fn count_refusal(&self, refusal: &Refusal) {
        let error = &refusal.error;
        if error.status.is_server_error() {
            tracing::warn!("endpoint picker: {error}");
        } else {
            tracing::debug!("endpoint picker: {error}");
        }
        self.parts
            .metrics
            .requests
            .answered
            .get_or_create(&RequestLabels {
                model: refusal.model.clone(),
                pool: String::new(),
                replica: String::new(),
                status: error.status.as_u16(),
            })
            .inc();
    }
}
