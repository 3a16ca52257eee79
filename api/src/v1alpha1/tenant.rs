//! `TenantPolicy`: who a tenant is (a value of the router's tenant header, or an API key from a
//! Secret), its share of capacity (weight), priority band, limits, and whether its requests may
//! be shed (answered 429) when demand exceeds capacity.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The desired state of a TenantPolicy.
#[derive(CustomResource, KubeSchema, Debug, Clone, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "warmpath.dev",
    version = "v1alpha1",
    deprecated = "warmpath.dev/v1alpha1 TenantPolicy is deprecated; use warmpath.dev/v1 TenantPolicy (same fields, same meaning)",
    kind = "TenantPolicy",
    plural = "tenantpolicies",
    namespaced,
    doc = "A TenantPolicy: how one tenant is recognized, shared and limited.",
    status = "TenantPolicyStatus",
    shortname = "tpol",
    category = "warmpath",
    printcolumn = r#"{"name":"Tenant","type":"string","jsonPath":".spec.header","description":"Tenant header value (empty: the object's name)"}"#,
    printcolumn = r#"{"name":"Weight","type":"integer","jsonPath":".spec.weight"}"#,
    printcolumn = r#"{"name":"Priority","type":"integer","jsonPath":".spec.priority"}"#,
    printcolumn = r#"{"name":"Sheddable","type":"boolean","jsonPath":".spec.sheddable"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct TenantPolicySpec {
    /// The value of the router's tenant header that names this tenant; absent: the
    /// TenantPolicy's own name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    #[x_kube(validation = Rule::new(r"self.matches('^[!-~]+$')").message("spec.header must be printable ASCII without spaces (it is compared with an HTTP header value), e.g. acme or team-a"))]
    pub header: Option<String>,
    /// API keys that identify this tenant (`Authorization: Bearer <key>`), read from a Secret
    /// in the same namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_secret_ref: Option<SecretKeyRef>,
    /// Share of capacity relative to other tenants of the same priority when demand exceeds
    /// capacity.
    #[serde(default = "default_weight")]
    #[schemars(range(min = 1, max = 1000))]
    pub weight: u32,
    /// Priority band: higher bands are served first; fair sharing applies within a band.
    #[serde(default)]
    #[schemars(range(min = -1000, max = 1000))]
    pub priority: i32,
    /// Limits on the tenant's traffic; absent: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<TenantLimits>,
    /// Whether requests may be rejected with 429 when the pool is saturated, instead of
    /// waiting in the tenant's queue.
    #[serde(default)]
    pub sheddable: bool,
}

fn default_weight() -> u32 {
    1
}

/// A key of a Secret in the TenantPolicy's namespace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyRef {
    /// The Secret's name.
    #[schemars(length(min = 1, max = 253))]
    #[x_kube(validation = Rule::new(r"self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')").message("apiKeySecretRef.name must be the name of a Secret in this namespace (lowercase letters, digits, '-' and '.')"))]
    pub name: String,
    /// The data key holding one API key; absent: every value in the Secret is a key of this
    /// tenant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    #[x_kube(validation = Rule::new(r"self.matches('^[-._a-zA-Z0-9]+$')").message("apiKeySecretRef.key must be a Secret data key (letters, digits, '-', '_' and '.')"))]
    pub key: Option<String>,
}

/// Per-tenant limits; every field is optional (absent: no limit).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!has(self.burst) || has(self.requestsPerSecond)").message("limits.burst needs limits.requestsPerSecond: burst is the size of the request-rate bucket"))]
#[x_kube(validation = Rule::new("!has(self.burst) || !has(self.requestsPerSecond) || self.burst >= self.requestsPerSecond").message("limits.burst must be at least limits.requestsPerSecond, or the rate could never be reached"))]
#[x_kube(validation = Rule::new("!has(self.tokenBurst) || has(self.tokensPerSecond)").message("limits.tokenBurst needs limits.tokensPerSecond: tokenBurst is the size of the token-rate bucket"))]
pub struct TenantLimits {
    /// Sustained requests per second (token bucket); over it: 429 with retry-after.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1000000))]
    pub requests_per_second: Option<u32>,
    /// Requests allowed at once above the sustained rate; absent: equal to the rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1000000))]
    pub burst: Option<u32>,
    /// Sustained tokens per second: a request costs its prompt's uncached tokens plus its
    /// expected output, corrected at completion to what it used; over it: 429 with
    /// retry-after.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100000000))]
    pub tokens_per_second: Option<u32>,
    /// Size of the tokens bucket; absent: one second of the rate. A request larger than the
    /// bucket passes when it is full and leaves it in debt, so big prompts are slowed, never
    /// refused forever.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1000000000))]
    pub token_burst: Option<u32>,
    /// Requests in flight at once (sent to replicas, not yet answered).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1000000))]
    pub max_concurrent_requests: Option<u32>,
    /// Requests waiting in the router's queue for this tenant; beyond it: 429.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 1000000))]
    pub max_queued_requests: Option<u32>,
}

/// What the controller observed of a TenantPolicy.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TenantPolicyStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// API keys loaded from the Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_keys: Option<i32>,
    /// `Accepted`, `ResolvedRefs` (the Secret and key exist) and `Ready`; messages say what to
    /// fix.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}
