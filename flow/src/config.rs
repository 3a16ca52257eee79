//! Settings of the flow-control core and the one place their values are checked
//! (`validate`). Front ends (the router's YAML file, a TenantPolicy) deserialize or fill these
//! types as they are, so that the rules here are the only rules.

use crate::ConfigError;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Bounds of a [`crate::FlowQueue`]. Every structure the queue keeps is bounded by these
/// (see the queue's module documentation for the accounting).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FlowQueueConfig {
    /// Requests waiting, all tenants together.
    pub max_entries: usize,
    /// Request bodies waiting, in bytes, all tenants together.
    pub max_bytes: u64,
    /// Requests waiting for one tenant (a TenantPolicy's `maxQueuedRequests` lowers it per
    /// tenant, see [`crate::Arrival::max_queued`]).
    pub max_entries_per_tenant: usize,
    /// Request bodies waiting for one tenant, in bytes.
    pub max_bytes_per_tenant: u64,
    /// Tenants whose fair-share state the queue keeps at once (those with requests waiting and
    /// recently idle ones); beyond it the least recently idle is forgotten.
    pub max_tenants: usize,
    /// How long a request may wait when its arrival names no TTL (llm-d's default: 60 s).
    pub ttl_ms: u64,
}

impl Default for FlowQueueConfig {
    fn default() -> Self {
        Self {
            max_entries: 10_000,
            max_bytes: 1 << 30,
            max_entries_per_tenant: 1_000,
            max_bytes_per_tenant: 128 << 20,
            max_tenants: 10_000,
            ttl_ms: 60_000,
        }
    }
}

impl FlowQueueConfig {
    /// Every bound at least 1, and a tenant's bounds not above the totals (a per-tenant bound
    /// above the total would never bind, which is almost certainly a typo).
    pub fn validate(&self) -> Result<(), ConfigError> {
        let counts = [
            ("max_entries", self.max_entries as u64),
            ("max_bytes", self.max_bytes),
            ("max_entries_per_tenant", self.max_entries_per_tenant as u64),
            ("max_bytes_per_tenant", self.max_bytes_per_tenant),
            ("max_tenants", self.max_tenants as u64),
            ("ttl_ms", self.ttl_ms),
        ];
        if let Some(&(field, _)) = counts.iter().find(|c| c.1 == 0) {
            return Err(ConfigError::Zero { field });
        }
        if self.max_entries_per_tenant > self.max_entries {
            return Err(ConfigError::AboveTotal {
                field: "max_entries_per_tenant",
                value: self.max_entries_per_tenant as u64,
                total_field: "max_entries",
                total: self.max_entries as u64,
            });
        }
        if self.max_bytes_per_tenant > self.max_bytes {
            return Err(ConfigError::AboveTotal {
                field: "max_bytes_per_tenant",
                value: self.max_bytes_per_tenant,
                total_field: "max_bytes",
                total: self.max_bytes,
            });
        }
        Ok(())
    }

    pub fn ttl(&self) -> Duration {
        Duration::from_millis(self.ttl_ms)
    }
}

/// One tenant's limits; every field is optional (absent: no such limit). Mirrors a
/// TenantPolicy's `limits`, with tokens per second added and rates as numbers so that a rate
/// below one per second can be said.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TenantLimitsConfig {
    /// Sustained requests per second (token bucket).
    pub requests_per_second: Option<f64>,
    /// Requests allowed at once above the sustained rate (the bucket's size); absent: one
    /// second of the rate, at least 1.
    pub burst: Option<f64>,
    /// Sustained tokens per second: a request costs its prompt's uncached tokens plus its
    /// expected output, corrected at completion to what it used.
    pub tokens_per_second: Option<f64>,
    /// Size of the tokens bucket; absent: one second of the rate, at least 1. A request larger
    /// than the bucket passes when the bucket is full and leaves it in debt, so big prompts are
    /// slowed, never refused forever.
    pub token_burst: Option<f64>,
    /// Requests in flight at once (admitted, not yet completed).
    pub max_concurrent_requests: Option<u32>,
}

impl TenantLimitsConfig {
    /// Rates positive and finite, bucket sizes at least 1 and only with their rate,
    /// concurrency at least 1.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let pairs = [
            (
                "requests_per_second",
                self.requests_per_second,
                "burst",
                self.burst,
            ),
            (
                "tokens_per_second",
                self.tokens_per_second,
                "token_burst",
                self.token_burst,
            ),
        ];
        for (rate_field, rate, burst_field, burst) in pairs {
            if let Some(value) = rate {
                if !(value.is_finite() && value > 0.0) {
                    return Err(ConfigError::Rate {
                        field: rate_field,
                        value,
                    });
                }
            }
            if let Some(value) = burst {
                if rate.is_none() {
                    return Err(ConfigError::BurstWithoutRate {
                        field: burst_field,
                        rate_field,
                    });
                }
                if !(value.is_finite() && value >= 1.0) {
                    return Err(ConfigError::Burst {
                        field: burst_field,
                        value,
                    });
                }
            }
        }
        if self.max_concurrent_requests == Some(0) {
            return Err(ConfigError::Zero {
                field: "max_concurrent_requests",
            });
        }
        Ok(())
    }

    /// No limit set: admission needs no state for this tenant.
    pub fn is_unlimited(&self) -> bool {
        self.requests_per_second.is_none()
            && self.tokens_per_second.is_none()
            && self.max_concurrent_requests.is_none()
    }
}

/// Bounds of a [`crate::TenantLimiters`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitersConfig {
    /// Limited tenants whose buckets and in-flight counts are kept at once.
    pub max_tenants: usize,
}

impl Default for LimitersConfig {
    fn default() -> Self {
        Self {
            max_tenants: 10_000,
        }
    }
}

impl LimitersConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.max_tenants == 0 {
            return Err(ConfigError::Zero {
                field: "max_tenants",
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        FlowQueueConfig::default().validate().unwrap();
        TenantLimitsConfig::default().validate().unwrap();
        LimitersConfig::default().validate().unwrap();
        assert!(TenantLimitsConfig::default().is_unlimited());
    }

    #[test]
    fn queue_errors_name_the_field() {
        let zero = FlowQueueConfig {
            max_bytes: 0,
            ..FlowQueueConfig::default()
        };
        assert_eq!(zero.validate().unwrap_err().field(), ["max_bytes"]);
        let ttl = FlowQueueConfig {
            ttl_ms: 0,
            ..FlowQueueConfig::default()
        };
        assert_eq!(ttl.validate().unwrap_err().field(), ["ttl_ms"]);
        let above = FlowQueueConfig {
            max_entries: 10,
            max_entries_per_tenant: 11,
            ..FlowQueueConfig::default()
        };
        let err = above.validate().unwrap_err();
        assert_eq!(err.field(), ["max_entries_per_tenant"]);
        assert!(err.to_string().contains("max_entries"), "{err}");
        let bytes = FlowQueueConfig {
            max_bytes: 100,
            max_bytes_per_tenant: 101,
            ..FlowQueueConfig::default()
        };
        assert_eq!(
            bytes.validate().unwrap_err().field(),
            ["max_bytes_per_tenant"]
        );
    }

    #[test]
    fn limit_errors_name_the_field() {
        let cases = [
            (
                TenantLimitsConfig {
                    requests_per_second: Some(0.0),
                    ..Default::default()
                },
                "requests_per_second",
            ),
            (
                TenantLimitsConfig {
                    tokens_per_second: Some(f64::NAN),
                    ..Default::default()
                },
                "tokens_per_second",
            ),
            (
                TenantLimitsConfig {
                    burst: Some(5.0),
                    ..Default::default()
                },
                "burst",
            ),
            (
                TenantLimitsConfig {
                    tokens_per_second: Some(100.0),
                    token_burst: Some(0.5),
                    ..Default::default()
                },
                "token_burst",
            ),
            (
                TenantLimitsConfig {
                    max_concurrent_requests: Some(0),
                    ..Default::default()
                },
                "max_concurrent_requests",
            ),
        ];
        for (config, field) in cases {
            assert_eq!(
                config.validate().unwrap_err().field(),
                [field],
                "{config:?}"
            );
        }
        let err = LimitersConfig { max_tenants: 0 }.validate().unwrap_err();
        assert_eq!(err.field(), ["max_tenants"]);
    }

    #[test]
    fn yaml_uses_defaults_and_refuses_unknown_fields() {
        let q: FlowQueueConfig = serde_yaml::from_str("max_entries: 5\nttl_ms: 100\n").unwrap();
        assert_eq!(q.max_entries, 5);
        assert_eq!(q.ttl(), Duration::from_millis(100));
        assert_eq!(q.max_bytes, FlowQueueConfig::default().max_bytes);
        assert!(serde_yaml::from_str::<FlowQueueConfig>("max_entry: 5\n").is_err());

        let l: TenantLimitsConfig =
            serde_yaml::from_str("requests_per_second: 2\nmax_concurrent_requests: 3\n").unwrap();
        assert_eq!(l.requests_per_second, Some(2.0));
        assert_eq!(l.max_concurrent_requests, Some(3));
        assert!(!l.is_unlimited());
        assert!(serde_yaml::from_str::<TenantLimitsConfig>("rps: 2\n").is_err());
        assert!(serde_yaml::from_str::<LimitersConfig>("max_tenant: 2\n").is_err());
    }
}
