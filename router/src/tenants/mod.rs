//! Who a request belongs to: its tenant, from an API key or a trusted tenant header, else the
//! default tenant.
//!
//! A [`Directory`] is built with each routing table from the `tenants:` configuration (the file's
//! policies and, in Kubernetes mode, the TenantPolicies found), so a request keeps the rules it
//! started with. The rules, in order:
//! 1. `Authorization: Bearer <key>` with a known key → that key's tenant.
//! 2. Otherwise, from a trusted peer (`trusted_sources`), the first configured tenant header
//!    present names the tenant: a policy whose header value it is, or else a tenant of that
//!    name with the default tenant's settings. From any other peer tenant headers are ignored:
//!    a client cannot claim someone else's share by setting a header.
//! 3. Otherwise, when keys are required, 401 (an unknown or missing key); else the default tenant.
//!
//! Keys are compared as whole strings in a hash map and never logged, put in metrics or
//! echoed in errors.

mod objectives;
#[cfg(test)]
mod tests;

use objectives::named_objective;
pub use objectives::{Objective, Objectives, OBJECTIVE_HEADERS};

use crate::config::{is_token, KeyDigest, TenantPolicyConfig, TenantsConfig};
use crate::errors::ApiError;
use http::{header, HeaderMap, HeaderName};
use ipnet::IpNet;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use warmpath_flow::TenantLimitsConfig;

/// The peer a request came from, put in the request's extensions by the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerAddr(pub std::net::SocketAddr);

impl PeerAddr {
    /// The address of the peer a request with these extensions came from, if the server put it
    /// there.
    pub fn ip_of(extensions: &http::Extensions) -> Option<IpAddr> {
        extensions.get::<PeerAddr>().map(|p| p.0.ip())
    }
}

/// A tenant's settings as admission uses them.
#[derive(Debug, Clone, PartialEq)]
pub struct Tenant {
    pub name: Arc<str>,
    pub weight: u32,
    pub priority: i32,
    /// Refused rather than queued when saturated, at the tenant's own priority (`sheddable:
    /// true` or a negative priority).
    pub sheddable: bool,
    /// `sheddable: true`: refused rather than queued whatever objective a request names.
    pub always_sheddable: bool,
    pub max_queued: Option<usize>,
    pub limits: TenantLimitsConfig,
}

impl Tenant {
    fn from_policy(name: Arc<str>, p: &TenantPolicyConfig) -> Self {
        Self {
            name,
            weight: p.weight.max(1),
            priority: p.priority,
            sheddable: p.is_sheddable(),
            always_sheddable: p.sheddable,
            max_queued: p.max_queued_requests,
            limits: p.limits,
        }
    }
}

impl Tenant {
    /// The priority band of this tenant's request naming `objective` (a known one), and whether
    /// it is refused rather than queued when saturated: the objective's priority, sheddable when
    /// negative (as a tenant's) or when the tenant is `sheddable: true`; without an objective,
    /// the tenant's own.
    pub fn band(&self, objective: Option<&Objective>) -> (i32, bool) {
        match objective {
            Some(o) => (o.priority, self.always_sheddable || o.priority < 0),
            None => (self.priority, self.sheddable),
        }
    }
}

/// How the tenant was found (for logs and tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    ApiKey,
    Header,
    Default,
}

/// A request's tenant.
#[derive(Debug, Clone)]
pub struct Identity {
    pub tenant: Arc<Tenant>,
    pub via: Via,
}

/// The tenant rules of one routing table.
#[derive(Debug)]
pub struct Directory {
    /// By the keyed hash of the key (see [`ApiKey`](crate::config::ApiKey)).
    by_key: HashMap<KeyDigest, Arc<Tenant>>,
    by_header: HashMap<Box<str>, Arc<Tenant>>,
    default: Arc<Tenant>,
    default_policy: TenantPolicyConfig,
    trusted: Vec<IpNet>,
    headers: Vec<HeaderName>,
    require_key: bool,
    strip_authorization: bool,
}

impl Directory {
    /// From a validated configuration.
    pub fn new(config: &TenantsConfig) -> Self {
        let mut by_key = HashMap::new();
        let mut by_header = HashMap::new();
        for p in &config.policies {
            let tenant = Arc::new(Tenant::from_policy(Arc::from(p.name.as_str()), p));
            by_header.insert(Box::from(p.header_value()), tenant.clone());
            for key in &p.api_keys {
                by_key.insert(key.digest(), tenant.clone());
            }
        }
        let default = Arc::new(Tenant::from_policy(
            Arc::from(config.default.name.as_str()),
            &config.default,
        ));
        Self {
            strip_authorization: !config.forward_api_key && !by_key.is_empty(),
            by_key,
            by_header,
            default,
            default_policy: config.default.clone(),
            trusted: config.trusted_sources.clone(),
            headers: config
                .headers
                .iter()
                .filter_map(|h| HeaderName::from_bytes(h.as_bytes()).ok())
                .collect(),
            require_key: config.require_api_key,
        }
    }

    /// The default tenant.
    pub fn default_tenant(&self) -> &Arc<Tenant> {
        &self.default
    }

    /// Whether the client's `Authorization` header must be removed before forwarding.
    pub fn strips_authorization(&self) -> bool {
        self.strip_authorization
    }

    /// Tenants configured by name (policies).
    pub fn policies(&self) -> impl Iterator<Item = &Arc<Tenant>> {
        self.by_header.values()
    }

    pub(crate) fn trusts(&self, peer: Option<IpAddr>) -> bool {
        // An IPv4 peer on an IPv6 socket arrives as ::ffff:a.b.c.d.
        let peer = peer.map(|ip| match ip {
            IpAddr::V6(v6) => v6
                .to_ipv4_mapped()
                .map(IpAddr::V4)
                .unwrap_or(IpAddr::V6(v6)),
            v4 => v4,
        });
        peer.is_some_and(|ip| self.trusted.iter().any(|net| net.contains(&ip)))
    }

    /// The objective a request from `peer` names, counted only from trusted peers (a gateway in
    /// front, `tenants.trusted_sources`) as tenant headers are: an objective chooses a
    /// priority band ahead of other tenants' work, which no client may choose for itself
    /// (llm-d takes the header from anyone).
    pub fn objective<'h>(&self, headers: &'h HeaderMap, peer: Option<IpAddr>) -> Option<&'h str> {
        self.trusts(peer)
            .then(|| named_objective(headers))
            .flatten()
    }

    /// The tenant of a request with these headers from `peer`, or 401.
    pub fn identify(
        &self,
        headers: &HeaderMap,
        peer: Option<IpAddr>,
    ) -> Result<Identity, ApiError> {
        let key = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(bearer);
        let known = key
            .filter(|_| !self.by_key.is_empty())
            .and_then(|k| self.by_key.get(&KeyDigest::of(k.as_bytes())));
        if let Some(tenant) = known {
            return Ok(Identity {
                tenant: tenant.clone(),
                via: Via::ApiKey,
            });
        }
        if !self.headers.is_empty() && self.trusts(peer) {
            let named = self
                .headers
                .iter()
                .find_map(|h| headers.get(h))
                .and_then(|v| v.to_str().ok())
                .map(str::trim)
                .filter(|v| is_token(v));
            if let Some(name) = named {
                let tenant = match self.by_header.get(name) {
                    Some(t) => t.clone(),
                    None => Arc::new(Tenant::from_policy(Arc::from(name), &self.default_policy)),
                };
                return Ok(Identity {
                    tenant,
                    via: Via::Header,
                });
            }
        }
        if self.require_key {
            return Err(ApiError::unauthorized(if key.is_some() {
                "Incorrect API key provided."
            } else {
                "You didn't provide an API key. Send it as `Authorization: Bearer <key>`."
            }));
        }
        Ok(Identity {
            tenant: self.default.clone(),
            via: Via::Default,
        })
    }
}

/// The key of an `Authorization: Bearer <key>` value (the scheme is case-insensitive).
fn bearer(value: &str) -> Option<&str> {
    let (scheme, rest) = value.trim().split_once(' ')?;
    let key = rest.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !key.is_empty()).then_some(key)
}
