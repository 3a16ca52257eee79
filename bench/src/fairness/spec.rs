//! One tenant of a fairness run, as given on the command line:
//! `--tenant name=steady,rate=4,prompt_tokens=256,output_tokens=32` (open loop, Poisson arrivals
//! at `rate` requests/s) or `--tenant name=flood,concurrency=64` (closed loop, `concurrency`
//! requests in flight), with `weight=` for the fairness computation only (the load generator
//! does not send it; the router's configuration gives tenants their weights). Token counts are
//! fixed (`output_tokens=32`) or drawn uniformly per request from a range (`output_tokens=16-48`):
//! requests of one length all finish in the same engine step, so a fleet fed only those runs in
//! lock-step waves, which real traffic does not.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// How a tenant offers its load.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub enum TenantLoad {
    /// Poisson arrivals at `rate` requests/s, whatever the answers do. An arrival that finds
    /// `max_in_flight` of the tenant's requests unanswered is not sent (counted as skipped), so
    /// that a server that stops answering cannot make the generator hold unbounded state.
    Open { rate: f64, max_in_flight: usize },
    /// `concurrency` requests in flight: each answer is followed by the next request (after
    /// `pause_after_error_ms` when the answer was a refusal or an error, so that a tenant
    /// refused at once does not spin).
    Closed {
        concurrency: usize,
        pause_after_error_ms: u64,
    },
}

/// A token count per request: `min` to `max` inclusive, uniformly (fixed when equal).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenCount {
    pub min: u32,
    pub max: u32,
}

impl TokenCount {
    pub const fn fixed(n: u32) -> Self {
        Self { min: n, max: n }
    }

    /// One request's count.
    pub fn draw(&self, rng: &mut crate::rng::Rng64) -> u32 {
        if self.max <= self.min {
            return self.min;
        }
        self.min + rng.below(u64::from(self.max - self.min) + 1) as u32
    }

    pub fn mean(&self) -> f64 {
        (f64::from(self.min) + f64::from(self.max)) / 2.0
    }
}

impl fmt::Display for TokenCount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.min == self.max {
            write!(f, "{}", self.min)
        } else {
            write!(f, "{}-{}", self.min, self.max)
        }
    }
}

impl FromStr for TokenCount {
    type Err = SpecError;

    /// `N` or `MIN-MAX`, at least 1.
    fn from_str(s: &str) -> Result<Self, SpecError> {
        let bad = || {
            SpecError(format!(
                "`{s}` is not a token count (N or MIN-MAX, at least 1)"
            ))
        };
        let (lo, hi) = s.split_once('-').unwrap_or((s, s));
        let min: u32 = lo.trim().parse().map_err(|_| bad())?;
        let max: u32 = hi.trim().parse().map_err(|_| bad())?;
        if min == 0 || max < min {
            return Err(bad());
        }
        Ok(Self { min, max })
    }
}

/// One tenant's load and request shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TenantSpec {
    /// Sent as the tenant header; the key of the results.
    pub name: String,
    pub load: TenantLoad,
    /// Prompt length, tokens (the simulator's 4-byte words).
    pub prompt_tokens: TokenCount,
    /// `max_tokens` of a request (generated in full: `ignore_eos`).
    pub output_tokens: TokenCount,
    /// The tenant's weight in the fairness computation (its expected share is
    /// weight / Σ weights).
    pub weight: f64,
}

pub const DEFAULT_PROMPT_TOKENS: TokenCount = TokenCount::fixed(256);
pub const DEFAULT_OUTPUT_TOKENS: TokenCount = TokenCount::fixed(32);
pub const DEFAULT_MAX_IN_FLIGHT: usize = 2048;
pub const DEFAULT_PAUSE_AFTER_ERROR_MS: u64 = 100;

/// Why a `--tenant` value was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecError(pub String);

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} (a tenant is `name=N,rate=R` or `name=N,concurrency=C`, with optional \
             prompt_tokens=, output_tokens=, weight=, max_in_flight= (open loop), \
             pause_after_error_ms= (closed loop))",
            self.0
        )
    }
}

impl std::error::Error for SpecError {}

const KEYS: [&str; 8] = [
    "name",
    "rate",
    "concurrency",
    "prompt_tokens",
    "output_tokens",
    "weight",
    "max_in_flight",
    "pause_after_error_ms",
];

impl FromStr for TenantSpec {
    type Err = SpecError;

    fn from_str(s: &str) -> Result<Self, SpecError> {
        let err = |m: String| Err(SpecError(m));
        let mut values: Vec<(&str, &str)> = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let Some((k, v)) = part.split_once('=') else {
                return err(format!("`{part}` is not key=value"));
            };
            let (k, v) = (k.trim(), v.trim());
            if !KEYS.contains(&k) {
                return err(format!("unknown key `{k}`"));
            }
            if values.iter().any(|(seen, _)| *seen == k) {
                return err(format!("`{k}` given twice"));
            }
            values.push((k, v));
        }
        let get = |k: &str| values.iter().find(|(key, _)| *key == k).map(|(_, v)| *v);
        fn num<T: FromStr>(k: &str, v: Option<&str>) -> Result<Option<T>, SpecError> {
            v.map(|v| {
                v.parse()
                    .map_err(|_| SpecError(format!("`{k}={v}` is not a number")))
            })
            .transpose()
        }
        let Some(name) = get("name") else {
            return err("no `name=`".into());
        };
        if !is_header_token(name) {
            return err(format!(
                "name `{name}` must be 1-256 visible ASCII characters (it is a header value)"
            ));
        }
        let rate: Option<f64> = num("rate", get("rate"))?;
        let concurrency: Option<usize> = num("concurrency", get("concurrency"))?;
        let max_in_flight: Option<usize> = num("max_in_flight", get("max_in_flight"))?;
        let pause: Option<u64> = num("pause_after_error_ms", get("pause_after_error_ms"))?;
        let load = match (rate, concurrency) {
            (Some(_), Some(_)) => return err("give `rate=` or `concurrency=`, not both".into()),
            (None, None) => return err("give `rate=` (open loop) or `concurrency=`".into()),
            (Some(r), None) => {
                if !(r > 0.0 && r.is_finite()) {
                    return err(format!("rate must be above 0, not {r}"));
                }
                if pause.is_some() {
                    return err("`pause_after_error_ms` is for closed loops".into());
                }
                let max_in_flight = max_in_flight.unwrap_or(DEFAULT_MAX_IN_FLIGHT);
                if max_in_flight == 0 {
                    return err("max_in_flight must be at least 1".into());
                }
                TenantLoad::Open {
                    rate: r,
                    max_in_flight,
                }
            }
            (None, Some(c)) => {
                if c == 0 {
                    return err("concurrency must be at least 1".into());
                }
                if max_in_flight.is_some() {
                    return err("`max_in_flight` is for open loops (rate=)".into());
                }
                TenantLoad::Closed {
                    concurrency: c,
                    pause_after_error_ms: pause.unwrap_or(DEFAULT_PAUSE_AFTER_ERROR_MS),
                }
            }
        };
        let count = |k: &str, default: TokenCount| -> Result<TokenCount, SpecError> {
            get(k).map_or(Ok(default), |v| {
                v.parse()
                    .map_err(|e: SpecError| SpecError(format!("{k}: {}", e.0)))
            })
        };
        let prompt_tokens = count("prompt_tokens", DEFAULT_PROMPT_TOKENS)?;
        let output_tokens = count("output_tokens", DEFAULT_OUTPUT_TOKENS)?;
        let weight: f64 = num("weight", get("weight"))?.unwrap_or(1.0);
        if !(weight > 0.0 && weight.is_finite()) {
            return err(format!("weight must be above 0, not {weight}"));
        }
        Ok(TenantSpec {
            name: name.to_owned(),
            load,
            prompt_tokens,
            output_tokens,
            weight,
        })
    }
}

/// A value that can be sent as a header and read back as a tenant name.
fn is_header_token(s: &str) -> bool {
    (1..=256).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_graphic())
}

/// Checks a run's tenants together: at least one, names distinct.
pub fn check_tenants(tenants: &[TenantSpec]) -> Result<(), SpecError> {
    if tenants.is_empty() {
        return Err(SpecError("give at least one --tenant".into()));
    }
    let mut names = BTreeSet::new();
    for t in tenants {
        if !names.insert(t.name.as_str()) {
            return Err(SpecError(format!("tenant `{}` given twice", t.name)));
        }
    }
    Ok(())
}

/// A stable 64-bit id of a tenant name (FNV-1a), to derive the tenant's random streams from
/// the run's seed: the same tenant gets the same prompts and arrivals whatever other tenants
/// run beside it.
pub fn name_stream(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<TenantSpec, SpecError> {
        s.parse()
    }

    #[test]
    fn open_and_closed_tenants_with_defaults() {
        let t = parse("name=steady,rate=4").unwrap();
        assert_eq!(t.name, "steady");
        assert_eq!(
            t.load,
            TenantLoad::Open {
                rate: 4.0,
                max_in_flight: DEFAULT_MAX_IN_FLIGHT
            }
        );
        assert_eq!(
            (t.prompt_tokens, t.output_tokens, t.weight),
            (DEFAULT_PROMPT_TOKENS, DEFAULT_OUTPUT_TOKENS, 1.0)
        );
        let t =
            parse(" name=b , concurrency=64, prompt_tokens=2048,output_tokens=16-48,weight=2.5")
                .unwrap();
        assert_eq!(
            t.load,
            TenantLoad::Closed {
                concurrency: 64,
                pause_after_error_ms: DEFAULT_PAUSE_AFTER_ERROR_MS
            }
        );
        assert_eq!(
            (t.prompt_tokens, t.output_tokens, t.weight),
            (
                TokenCount::fixed(2048),
                TokenCount { min: 16, max: 48 },
                2.5
            )
        );
        let t = parse("name=f,rate=0.5,max_in_flight=10").unwrap();
        assert_eq!(
            t.load,
            TenantLoad::Open {
                rate: 0.5,
                max_in_flight: 10
            }
        );
        let t = parse("concurrency=2,pause_after_error_ms=0,name=c").unwrap();
        assert_eq!(
            t.load,
            TenantLoad::Closed {
                concurrency: 2,
                pause_after_error_ms: 0
            }
        );
    }

    #[test]
    fn bad_specs_say_what_is_wrong() {
        for (s, needle) in [
            ("rate=4", "no `name=`"),
            ("name=a", "give `rate=`"),
            ("name=a,rate=1,concurrency=2", "not both"),
            ("name=a,rate=0", "above 0"),
            ("name=a,rate=-1", "above 0"),
            ("name=a,rate=inf", "above 0"),
            ("name=a,rate=x", "not a number"),
            ("name=a,concurrency=0", "at least 1"),
            ("name=a,concurrency=1.5", "not a number"),
            ("name=a,rate=1,weight=0", "weight"),
            ("name=a,rate=1,prompt_tokens=0", "at least 1"),
            (
                "name=a,rate=1,output_tokens=48-16",
                "output_tokens: `48-16`",
            ),
            ("name=a,rate=1,output_tokens=1-x", "not a token count"),
            ("name=a,rate=1,colour=red", "unknown key `colour`"),
            ("name=a,rate=1,rate=2", "twice"),
            ("name=a,rate", "not key=value"),
            ("name=a b,rate=1", "visible ASCII"),
            ("name=,rate=1", "visible ASCII"),
            ("name=a,concurrency=3,max_in_flight=4", "open loops"),
            ("name=a,rate=3,pause_after_error_ms=4", "closed loops"),
            ("name=a,rate=3,max_in_flight=0", "at least 1"),
        ] {
            let e = parse(s).expect_err(s);
            assert!(e.0.contains(needle), "{s}: {e}");
        }
    }

    #[test]
    fn token_counts_draw_within_their_range() {
        let r: TokenCount = "16-48".parse().unwrap();
        assert_eq!(r.to_string(), "16-48");
        assert_eq!(TokenCount::fixed(7).to_string(), "7");
        assert_eq!(r.mean(), 32.0);
        let mut rng = crate::rng::Rng64::new(5);
        let draws: Vec<u32> = (0..2000).map(|_| r.draw(&mut rng)).collect();
        assert!(draws.iter().all(|d| (16..=48).contains(d)));
        assert!(draws.contains(&16) && draws.contains(&48));
        let mean = draws.iter().map(|&d| f64::from(d)).sum::<f64>() / 2000.0;
        assert!((mean - 32.0).abs() < 1.0, "{mean}");
        assert_eq!(TokenCount::fixed(9).draw(&mut rng), 9);
    }

    #[test]
    fn tenants_are_checked_together() {
        let a = parse("name=a,rate=1").unwrap();
        let b = parse("name=b,rate=1").unwrap();
        assert!(check_tenants(&[a.clone(), b]).is_ok());
        assert!(check_tenants(&[]).is_err());
        assert!(check_tenants(&[a.clone(), a])
            .unwrap_err()
            .0
            .contains("twice"));
    }

    #[test]
    fn name_streams_are_stable_and_distinct() {
        // FNV-1a of the empty string is its offset basis; of "a", the published value.
        assert_eq!(name_stream(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(name_stream("a"), 0xaf63_dc4c_8601_ec8c);
        assert_ne!(name_stream("steady"), name_stream("flood"));
    }
}
