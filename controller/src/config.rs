//! The controller's settings: a command line whose every flag falls back to the environment
//! variable the Helm chart sets (`templates/controller-deployment.yaml`; a flag, e.g. from the
//! chart's `controller.extraArgs`, wins over its variable), from one table ([`SETTINGS`]) that
//! gives the flags, their variables, `--help` and the names errors use. Parsing is a pure
//! function of a lookup so that it is tested without touching the process environment.

use crate::error::Error;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;
use warmpath_api::boundaries::{self, Boundaries, Network, ReplicaNetworks};

/// Leader-election timing, with client-go's meanings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseTiming {
    /// How long a lease stays valid after its last renewal, as seen by standbys.
    pub duration: Duration,
    /// How long the leader keeps trying to renew before it gives up leadership.
    pub renew_deadline: Duration,
    /// Time between attempts to acquire or renew.
    pub retry_period: Duration,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Namespaces to watch; empty: every namespace.
    pub watch_namespaces: Vec<String>,
    /// Namespaces whose Secrets may be read (never cluster-wide).
    pub secret_namespaces: Vec<String>,
    pub admin_listen: SocketAddr,
    pub lease_name: String,
    pub lease_namespace: String,
    pub lease: LeaseTiming,
    /// This process's name in the Lease.
    pub identity: String,
    /// The routers' boundaries (the chart gives both the same values), so that statuses say
    /// what the routers leave out and why.
    pub boundaries: Boundaries,
}

/// Every setting: its flag, the environment variable it falls back to, and what it means.
pub const SETTINGS: &[(&str, &str, &str)] = &[
    ("watch-namespaces", "WARMPATH_WATCH_NAMESPACES", "Namespaces to watch, comma-separated; empty: every namespace"),
    ("secret-namespaces", "WARMPATH_SECRET_NAMESPACES", "Namespaces whose Secrets may be read (TenantPolicies' API keys), comma-separated; never cluster-wide"),
    ("admin-listen", "WARMPATH_ADMIN_LISTEN", "Address of /metrics, /healthz and /readyz [default: 0.0.0.0:9091]"),
    ("lease-name", "WARMPATH_LEASE_NAME", "The leader-election Lease [default: warmpath-controller]"),
    ("lease-namespace", "WARMPATH_LEASE_NAMESPACE", "The Lease's namespace (required; the pod's namespace when unset)"),
    ("pod-namespace", "POD_NAMESPACE", "The pod's namespace (downward API): the Lease's when --lease-namespace is unset"),
    ("lease-duration-seconds", "WARMPATH_LEASE_DURATION_SECONDS", "How long a lease holds after its last renewal [default: 15]"),
    ("lease-renew-deadline-seconds", "WARMPATH_LEASE_RENEW_DEADLINE_SECONDS", "How long the leader tries to renew before it gives up [default: 10]"),
    ("lease-retry-period-seconds", "WARMPATH_LEASE_RETRY_PERIOD_SECONDS", "Time between attempts to acquire or renew [default: 2]"),
    ("identity", "POD_NAME", "This process's name in the Lease [default: hostname and pid]"),
    ("replica-networks", "WARMPATH_REPLICA_NETWORKS", "Networks InferenceReplicas may point at (CIDRs, comma-separated), as the routers have them"),
    ("replica-hostnames", "WARMPATH_REPLICA_HOSTNAMES", "Whether replicas may be DNS names (true or false), as the routers have it"),
    ("share-models-with", "WARMPATH_SHARE_MODELS_WITH", "Namespaces that may serve a model another namespace claimed first, as the routers have them"),
    ("tokenizer-root", "WARMPATH_TOKENIZER_ROOT", "Where pools' tokenizers and templates must resolve, as the routers have it"),
    ("max-tenant-priority", "WARMPATH_MAX_TENANT_PRIORITY", "The highest priority of a TenantPolicy outside the router's namespace, as the routers have it"),
    ("router-namespace", "WARMPATH_ROUTER_NAMESPACE", "The operator's namespace (the release's), as the routers have it"),
];

/// The command line ([`SETTINGS`]): `--help` lists every flag with its variable.
pub fn cli() -> clap::Command {
    SETTINGS.iter().fold(
        clap::Command::new("warmpath-controller")
            .version(env!("CARGO_PKG_VERSION"))
            .about("Keeps one InferenceReplica per ready pod of each InferencePool and reports warmpath's status conditions; one replica leads through a Lease."),
        |cmd, (flag, env, help)| {
            cmd.arg(
                clap::Arg::new(*flag)
                    .long(*flag)
                    .env(*env)
                    .value_name("VALUE")
                    .help(*help),
            )
        },
    )
}

/// How an error names a setting: its flag and its variable.
fn named(env: &str) -> String {
    SETTINGS
        .iter()
        .find(|(_, e, _)| *e == env)
        .map_or_else(|| env.to_owned(), |(flag, e, _)| format!("--{flag} ({e})"))
}

fn list(value: Option<String>) -> Vec<String> {
    let mut out: Vec<String> = value
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect();
    out.sort();
    out.dedup();
    out
}

fn seconds(
    get: &impl Fn(&str) -> Option<String>,
    key: &str,
    default: u64,
) -> Result<Duration, Error> {
    match get(key).filter(|v| !v.trim().is_empty()) {
        None => Ok(Duration::from_secs(default)),
        Some(v) => v
            .trim()
            .parse::<u64>()
            .ok()
            .filter(|s| *s > 0)
            .map(Duration::from_secs)
            .ok_or_else(|| {
                Error::Config(format!(
                    "{}={v:?}: expected a whole number of seconds > 0",
                    named(key)
                ))
            }),
    }
}

impl Config {
    /// The settings from parsed command-line `matches` (each flag or its variable).
    pub fn from_matches(
        matches: &clap::ArgMatches,
        default_identity: impl FnOnce() -> String,
    ) -> Result<Config, Error> {
        Self::from_lookup(
            |env| {
                let (flag, _, _) = SETTINGS.iter().find(|(_, e, _)| *e == env)?;
                matches.get_one::<String>(flag).cloned()
            },
            default_identity,
        )
    }

    /// Reads the settings through `get`, keyed by their environment variables. `default_identity` is used
    /// when `POD_NAME` is unset (hostname and pid outside a cluster).
    pub fn from_lookup(
        get: impl Fn(&str) -> Option<String>,
        default_identity: impl FnOnce() -> String,
    ) -> Result<Config, Error> {
        let admin = get("WARMPATH_ADMIN_LISTEN").unwrap_or_else(|| "0.0.0.0:9091".into());
        let admin_listen = admin.trim().parse().map_err(|_| {
            Error::Config(format!(
                "{}={admin:?}: expected host:port, e.g. 0.0.0.0:9091",
                named("WARMPATH_ADMIN_LISTEN")
            ))
        })?;
        let lease = LeaseTiming {
            duration: seconds(&get, "WARMPATH_LEASE_DURATION_SECONDS", 15)?,
            renew_deadline: seconds(&get, "WARMPATH_LEASE_RENEW_DEADLINE_SECONDS", 10)?,
            retry_period: seconds(&get, "WARMPATH_LEASE_RETRY_PERIOD_SECONDS", 2)?,
        };
        if lease.duration <= lease.renew_deadline || lease.renew_deadline <= lease.retry_period {
            return Err(Error::Config(format!(
                "lease timing must satisfy duration ({}s) > renew deadline ({}s) > retry period ({}s): otherwise a standby could take over while the leader still believes it leads",
                lease.duration.as_secs(),
                lease.renew_deadline.as_secs(),
                lease.retry_period.as_secs()
            )));
        }
        let lease_namespace = get("WARMPATH_LEASE_NAMESPACE")
            .or_else(|| get("POD_NAMESPACE"))
            .filter(|s| !s.trim().is_empty())
            .ok_or_else(|| {
                Error::Config(
                    format!(
                        "{} is not set: name the namespace of the leader-election Lease (in a pod, POD_NAMESPACE from the downward API does)",
                        named("WARMPATH_LEASE_NAMESPACE")
                    ),
                )
            })?;
        let identity = get("POD_NAME")
            .filter(|s| !s.trim().is_empty())
            .unwrap_or_else(default_identity);
        let allow = list(get("WARMPATH_REPLICA_NETWORKS"))
            .iter()
            .map(|n| n.parse::<Network>())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| Error::Config(format!("{}: {e}", named("WARMPATH_REPLICA_NETWORKS"))))?;
        let hostnames = match get("WARMPATH_REPLICA_HOSTNAMES").as_deref().map(str::trim) {
            None | Some("") | Some("false") | Some("0") => false,
            Some("true") | Some("1") => true,
            Some(v) => {
                return Err(Error::Config(format!(
                    "{}={v:?}: expected true or false",
                    named("WARMPATH_REPLICA_HOSTNAMES")
                )))
            }
        };
        let max_tenant_priority =
            match get("WARMPATH_MAX_TENANT_PRIORITY").filter(|v| !v.trim().is_empty()) {
                None => boundaries::DEFAULT_MAX_TENANT_PRIORITY,
                Some(v) => v
                    .trim()
                    .parse::<i32>()
                    .ok()
                    .filter(|p| (-1000..=1000).contains(p))
                    .ok_or_else(|| {
                        Error::Config(format!(
                            "{}={v:?}: expected a whole number from -1000 to 1000",
                            named("WARMPATH_MAX_TENANT_PRIORITY")
                        ))
                    })?,
            };
        let boundaries = Boundaries {
            share_models_with: list(get("WARMPATH_SHARE_MODELS_WITH")),
            replica_networks: ReplicaNetworks { allow, hostnames },
            tokenizer_root: get("WARMPATH_TOKENIZER_ROOT")
                .filter(|v| !v.trim().is_empty())
                .map_or_else(
                    || PathBuf::from(boundaries::DEFAULT_TOKENIZER_ROOT),
                    PathBuf::from,
                ),
            max_tenant_priority,
            own_namespace: get("WARMPATH_ROUTER_NAMESPACE").filter(|v| !v.trim().is_empty()),
        };
        Ok(Config {
            boundaries,
            watch_namespaces: list(get("WARMPATH_WATCH_NAMESPACES")),
            secret_namespaces: list(get("WARMPATH_SECRET_NAMESPACES")),
            admin_listen,
            lease_name: get("WARMPATH_LEASE_NAME")
                .filter(|s| !s.trim().is_empty())
                .unwrap_or_else(|| "warmpath-controller".into()),
            lease_namespace,
            lease,
            identity,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn parse(pairs: &[(&str, &str)]) -> Result<Config, Error> {
        let env: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::from_lookup(|k| env.get(k).cloned(), || "host-1".into())
    }

    /// The error `pairs` are refused with, as the controller prints it.
    fn refused(pairs: &[(&str, &str)]) -> String {
        parse(pairs).unwrap_err().to_string()
    }

    #[test]
    fn reads_the_charts_variables() {
        let c = parse(&[
            ("WARMPATH_WATCH_NAMESPACES", " b, a ,,a"),
            ("WARMPATH_SECRET_NAMESPACES", "a"),
            ("WARMPATH_ADMIN_LISTEN", "127.0.0.1:0"),
            ("WARMPATH_LEASE_NAME", "wp"),
            ("WARMPATH_LEASE_NAMESPACE", "sys"),
            ("WARMPATH_LEASE_DURATION_SECONDS", "3"),
            ("WARMPATH_LEASE_RENEW_DEADLINE_SECONDS", "2"),
            ("WARMPATH_LEASE_RETRY_PERIOD_SECONDS", "1"),
            ("POD_NAME", "ctl-0"),
        ])
        .unwrap();
        assert_eq!(c.watch_namespaces, vec!["a", "b"]);
        assert_eq!(c.secret_namespaces, vec!["a"]);
        assert_eq!(c.admin_listen, "127.0.0.1:0".parse().unwrap());
        assert_eq!(c.lease_name, "wp");
        assert_eq!(c.lease.duration, Duration::from_secs(3));
        assert_eq!(c.identity, "ctl-0");
        assert_eq!(c.boundaries, Boundaries::default(), "the routers' defaults");
    }

    #[test]
    fn reads_the_routers_boundaries() {
        let c = parse(&[
            ("WARMPATH_LEASE_NAMESPACE", "sys"),
            ("WARMPATH_SHARE_MODELS_WITH", "b,a"),
            ("WARMPATH_REPLICA_NETWORKS", "10.0.0.0/8, fd00::/8"),
            ("WARMPATH_REPLICA_HOSTNAMES", "true"),
            ("WARMPATH_TOKENIZER_ROOT", "/models"),
            ("WARMPATH_MAX_TENANT_PRIORITY", "-5"),
            ("POD_NAMESPACE", "elsewhere"),
            ("WARMPATH_ROUTER_NAMESPACE", "wp-system"),
        ])
        .unwrap();
        let b = &c.boundaries;
        assert_eq!(b.share_models_with, ["a", "b"]);
        assert_eq!(b.replica_networks.allow.len(), 2);
        assert!(b.replica_networks.hostnames);
        assert_eq!(b.tokenizer_root, PathBuf::from("/models"));
        assert_eq!(b.max_tenant_priority, -5);
        assert_eq!(b.own_namespace.as_deref(), Some("wp-system"));
        for (k, v) in [
            ("WARMPATH_REPLICA_NETWORKS", "10.0.0.0/99"),
            ("WARMPATH_REPLICA_HOSTNAMES", "yes"),
            ("WARMPATH_MAX_TENANT_PRIORITY", "5000"),
        ] {
            let e = refused(&[("WARMPATH_LEASE_NAMESPACE", "sys"), (k, v)]);
            assert!(e.contains(k), "{e}");
        }
    }

    #[test]
    fn flags_win_over_their_variables_and_help_names_both() {
        let m = cli()
            .try_get_matches_from([
                "warmpath-controller",
                "--lease-namespace",
                "sys",
                "--max-tenant-priority",
                "7",
                "--admin-listen=127.0.0.1:7001",
            ])
            .unwrap();
        let c = Config::from_matches(&m, || "host-1".into()).unwrap();
        assert_eq!(c.lease_namespace, "sys");
        assert_eq!(c.boundaries.max_tenant_priority, 7);
        assert_eq!(c.admin_listen, "127.0.0.1:7001".parse().unwrap());
        let help = cli().render_long_help().to_string();
        for (flag, env, _) in SETTINGS {
            assert!(help.contains(&format!("--{flag}")), "{flag} in {help}");
            assert!(help.contains(env), "{env} in {help}");
        }
        assert!(cli()
            .try_get_matches_from(["warmpath-controller", "--no-such-flag"])
            .is_err());
        let e = refused(&[
            ("WARMPATH_LEASE_NAMESPACE", "sys"),
            ("WARMPATH_ADMIN_LISTEN", "x"),
        ]);
        assert!(e.contains("--admin-listen (WARMPATH_ADMIN_LISTEN)"), "{e}");
    }

    #[test]
    fn defaults_and_errors() {
        let c = parse(&[("WARMPATH_LEASE_NAMESPACE", "sys")]).unwrap();
        assert!(c.watch_namespaces.is_empty());
        assert_eq!(c.identity, "host-1");
        assert_eq!(c.admin_listen.port(), 9091);
        let e = refused(&[]);
        assert!(e.contains("WARMPATH_LEASE_NAMESPACE"), "{e}");
        let e = refused(&[
            ("WARMPATH_LEASE_NAMESPACE", "sys"),
            ("WARMPATH_LEASE_DURATION_SECONDS", "2"),
            ("WARMPATH_LEASE_RENEW_DEADLINE_SECONDS", "2"),
        ]);
        assert!(e.contains("duration"), "{e}");
        let e = refused(&[
            ("WARMPATH_LEASE_NAMESPACE", "sys"),
            ("WARMPATH_LEASE_RETRY_PERIOD_SECONDS", "soon"),
        ]);
        assert!(e.contains("WARMPATH_LEASE_RETRY_PERIOD_SECONDS"), "{e}");
        let e = refused(&[
            ("WARMPATH_LEASE_NAMESPACE", "sys"),
            ("WARMPATH_ADMIN_LISTEN", "nope"),
        ]);
        assert!(e.contains("WARMPATH_ADMIN_LISTEN"), "{e}");
    }
}
