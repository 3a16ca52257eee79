//! The `tenants:` section: who a request belongs to (the `flow:` section, what happens to it
//! when demand exceeds capacity, is `super::flow`'s).
//!
//! The per-tenant numbers (limits, queue bounds) are the flow core's own types
//! ([`warmpath_flow`]), checked by its `validate` methods, so that the file and a TenantPolicy
//! obey one set of rules.

use super::api_key::ApiKey;
use super::FieldPath;
use ipnet::IpNet;
use serde::Deserialize;
use std::collections::HashSet;
use std::path::PathBuf;
use warmpath_flow::TenantLimitsConfig;

/// `tenants:` how requests are attributed to tenants, and the tenants known by name.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TenantsConfig {
    /// Refuse (401) requests without a known API key, unless a trusted source names the tenant
    /// in a header (a gateway in front that authenticated the client).
    pub require_api_key: bool,
    /// Send the client's `Authorization` header on to the engines. When any tenant has API
    /// keys, the header is otherwise removed (a tenant's key is the router's business, not the
    /// engine's); with no keys configured it passes untouched (an engine's own `--api-key`).
    pub forward_api_key: bool,
    /// Peers (CIDRs) whose tenant headers are believed (and who may send prefill/decode
    /// fields); from anyone else they are ignored. Default: none. Loopback is not trusted by
    /// default: a mesh proxy in the pod would make every client it forwards trusted.
    pub trusted_sources: Vec<IpNet>,
    /// Headers that name the tenant, first present wins (from trusted sources only).
    pub headers: Vec<String>,
    /// The tenant of requests that name none (its `name` is the metric label and queue key).
    pub default: TenantPolicyConfig,
    /// Tenants with their own settings; any other name from a trusted header is a tenant with
    /// `default`'s settings.
    pub policies: Vec<TenantPolicyConfig>,
}

impl Default for TenantsConfig {
    fn default() -> Self {
        Self {
            require_api_key: false,
            forward_api_key: false,
            trusted_sources: Vec::new(),
            headers: vec![
                "x-warmpath-tenant".to_owned(),
                "x-llm-d-inference-fairness-id".to_owned(),
                "x-gateway-inference-fairness-id".to_owned(),
            ],
            default: TenantPolicyConfig {
                name: "default".to_owned(),
                ..TenantPolicyConfig::default()
            },
            policies: Vec::new(),
        }
    }
}

/// One tenant's settings (the static file's form of a TenantPolicy).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TenantPolicyConfig {
    /// The tenant's name: metric label, queue key, and the header value naming it unless
    /// `header` says otherwise.
    pub name: String,
    /// The tenant header value that names this tenant; absent: `name`.
    pub header: Option<String>,
    /// API keys (`Authorization: Bearer <key>`) of this tenant, held as keyed hashes
    /// ([`ApiKey`]).
    pub api_keys: Vec<ApiKey>,
    /// A file with more keys, one per line (blank lines and `#` comments skipped); read when
    /// the configuration is loaded.
    pub api_keys_file: Option<PathBuf>,
    /// Share relative to the other tenants of its priority band (1 to 1000).
    pub weight: u32,
    /// Priority band: higher is served first; negative is sheddable.
    pub priority: i32,
    /// Refused (429 `saturated`) instead of queued when the pool is saturated.
    pub sheddable: bool,
    /// Requests of this tenant waiting at once (the queue's per-tenant bound applies too).
    pub max_queued_requests: Option<usize>,
    pub limits: TenantLimitsConfig,
}

impl Default for TenantPolicyConfig {
    fn default() -> Self {
        Self {
            name: String::new(),
            header: None,
            api_keys: Vec::new(),
            api_keys_file: None,
            weight: 1,
            priority: 0,
            sheddable: false,
            max_queued_requests: None,
            limits: TenantLimitsConfig::default(),
        }
    }
}

impl TenantPolicyConfig {
    /// The header value that names this tenant.
    pub fn header_value(&self) -> &str {
        self.header.as_deref().unwrap_or(&self.name)
    }

    /// Whether requests of this tenant are refused rather than queued when saturated.
    pub fn is_sheddable(&self) -> bool {
        self.sheddable || self.priority < 0
    }

    /// Keys from `api_keys_file` joined to `api_keys` (done once at load).
    pub fn load_key_file(&mut self) -> Result<(), String> {
        let Some(path) = &self.api_keys_file else {
            return Ok(());
        };
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read `{}`: {e}", path.display()))?;
        self.api_keys.extend(
            text.lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with('#'))
                .map(ApiKey::new),
        );
        Ok(())
    }

    fn validate(&self, at: &FieldPath) -> Result<(), (FieldPath, String)> {
        if self.name.trim().is_empty() || !is_token(&self.name) {
            return Err((
                at.key("name"),
                "must be printable ASCII without spaces (1-256 characters)".to_owned(),
            ));
        }
        if let Some(h) = &self.header {
            if !is_token(h) {
                return Err((
                    at.key("header"),
                    "must be printable ASCII without spaces (1-256 characters)".to_owned(),
                ));
            }
        }
        if !(1..=1000).contains(&self.weight) {
            return Err((at.key("weight"), "must be between 1 and 1000".to_owned()));
        }
        if !(-1000..=1000).contains(&self.priority) {
            return Err((
                at.key("priority"),
                "must be between -1000 and 1000".to_owned(),
            ));
        }
        for (i, key) in self.api_keys.iter().enumerate() {
            if key.shape().is_some() {
                return Err((
                    at.key("api_keys").index(i),
                    "an API key must be 8 to 256 printable ASCII characters without spaces"
                        .to_owned(),
                ));
            }
        }
        self.limits.validate().map_err(|e| {
            let field = e
                .field()
                .into_iter()
                .fold(at.key("limits"), |p, k| p.key(k));
            (field, e.to_string())
        })
    }
}

/// A header value a tenant can be named by: 1-256 visible ASCII characters.
pub fn is_token(s: &str) -> bool {
    (1..=256).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_graphic())
}

impl TenantsConfig {
    pub(super) fn validate(&self, at: FieldPath) -> Result<(), (FieldPath, String)> {
        for (i, h) in self.headers.iter().enumerate() {
            if http::HeaderName::from_bytes(h.as_bytes()).is_err() {
                return Err((
                    at.key("headers").index(i),
                    format!("`{h}` is not an HTTP header name"),
                ));
            }
        }
        self.default.validate(&at.key("default"))?;
        if !self.default.api_keys.is_empty() || self.default.api_keys_file.is_some() {
            return Err((
                at.key("default").key("api_keys"),
                "the default tenant is the one without a key; give keys to a named tenant"
                    .to_owned(),
            ));
        }
        let mut names = HashSet::from([self.default.name.as_str()]);
        let mut headers = HashSet::new();
        let mut keys = HashSet::new();
        for (i, p) in self.policies.iter().enumerate() {
            let pp = at.key("policies").index(i);
            p.validate(&pp)?;
            if !names.insert(p.name.as_str()) {
                return Err((pp.key("name"), format!("duplicate tenant `{}`", p.name)));
            }
            if !headers.insert(p.header_value()) {
                return Err((
                    pp.key("header"),
                    format!("another tenant is already named `{}`", p.header_value()),
                ));
            }
            for (k, key) in p.api_keys.iter().enumerate() {
                if !keys.insert(key.digest()) {
                    // The key itself is never printed.
                    return Err((
                        pp.key("api_keys").index(k),
                        "this API key is also given to another tenant (or twice)".to_owned(),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Whether any tenant has API keys (then `Authorization` is the router's, see
    /// `forward_api_key`).
    pub fn has_keys(&self) -> bool {
        self.policies.iter().any(|p| !p.api_keys.is_empty())
    }
}
