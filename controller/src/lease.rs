//! Leader election through a `coordination.k8s.io/v1` Lease, with client-go's semantics: the
//! leader renews every retry period and gives up (the process stops writing and exits) when it
//! could not renew for the renew deadline; standbys take over a lease whose record has not
//! changed for its duration, measured on their own clock (so clock skew between nodes does not
//! matter), or at once when the leader released it on shutdown.
//!
//! Written here rather than with `kube-lease-manager` because that crate's leader keeps
//! reporting leadership while renewals fail (it retries with backoff past the lease's expiry,
//! so two writers could overlap), and its standbys sleep until the old expiry even after the
//! leader released the lease, which would turn a clean handover into a full lease duration.

use crate::config::LeaseTiming;
use crate::error::Error;
use crate::metrics::Metrics;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{ObjectMeta, PostParams};
use kube::Api;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Whether this process leads, shared with every reconciler (which must not write otherwise).
#[derive(Clone)]
pub struct Leadership {
    tx: Arc<watch::Sender<bool>>,
}

impl Default for Leadership {
    fn default() -> Self {
        Self::new()
    }
}

impl Leadership {
    pub fn new() -> Self {
        Leadership {
            tx: Arc::new(watch::channel(false).0),
        }
    }

    pub fn is_leader(&self) -> bool {
        *self.tx.borrow()
    }

    pub fn set(&self, leader: bool) {
        self.tx.send_replace(leader);
    }

    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.tx.subscribe()
    }
}

/// What to do with the Lease on one round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// No Lease yet: create it, held by us.
    Create,
    /// We hold it: renew.
    Renew,
    /// Free (released) or expired: take it.
    Acquire,
    /// Someone else holds a live lease.
    Wait,
}

/// The part of a Lease whose change shows that its holder is alive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub holder: Option<String>,
    pub renew_time: Option<String>,
    pub resource_version: Option<String>,
}

impl Record {
    pub fn of(lease: &Lease) -> Record {
        let spec = lease.spec.as_ref();
        Record {
            holder: spec
                .and_then(|s| s.holder_identity.clone())
                .filter(|h| !h.is_empty()),
            renew_time: spec
                .and_then(|s| s.renew_time.as_ref())
                .map(|t| t.0.to_string()),
            resource_version: lease.metadata.resource_version.clone(),
        }
    }
}

/// Decides one round. `unchanged_for` is how long the record has looked the same to us;
/// `duration` the lease's validity (the Lease's own `leaseDurationSeconds` when set).
pub fn decide(
    record: Option<&Record>,
    me: &str,
    unchanged_for: Duration,
    duration: Duration,
) -> Step {
    match record {
        None => Step::Create,
        Some(r) => match r.holder.as_deref() {
            None => Step::Acquire,
            Some(h) if h == me => Step::Renew,
            Some(_) if unchanged_for >= duration => Step::Acquire,
            Some(_) => Step::Wait,
        },
    }
}

/// Why a round did not finish.
#[derive(Debug, thiserror::Error)]
enum RoundError {
    #[error(transparent)]
    Api(#[from] kube::Error),
    #[error("no answer from the API server within {0:?}")]
    Deadline(Duration),
}

/// `call`'s result, or [`RoundError::Deadline`] when it takes longer than `budget`.
async fn within<T>(
    budget: Duration,
    call: impl std::future::Future<Output = Result<T, RoundError>>,
) -> Result<T, RoundError> {
    tokio::time::timeout(budget, call)
        .await
        .unwrap_or(Err(RoundError::Deadline(budget)))
}

/// Runs the election until `shutdown` resolves (then releases the lease if held and returns
/// `Ok`) or leadership is lost (returns `Err`: the caller must stop writing and exit).
pub struct Elector {
    pub api: Api<Lease>,
    pub name: String,
    pub identity: String,
    pub timing: LeaseTiming,
    pub leadership: Leadership,
    pub metrics: Arc<Metrics>,
}

fn now_micro() -> MicroTime {
    MicroTime(k8s_openapi::jiff::Timestamp::now())
}

impl Elector {
    fn held_spec(&self, old: Option<&LeaseSpec>, acquire: bool) -> LeaseSpec {
        let now = now_micro();
        let mut spec = old.cloned().unwrap_or_default();
        if acquire {
            spec.acquire_time = Some(now.clone());
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        }
        spec.holder_identity = Some(self.identity.clone());
        spec.lease_duration_seconds = Some(self.timing.duration.as_secs() as i32);
        spec.renew_time = Some(now);
        spec
    }

    fn lead(&self, leader: bool) {
        if self.leadership.is_leader() != leader {
            tracing::info!(identity = %self.identity, leader, "leadership changed");
        }
        self.leadership.set(leader);
        self.metrics.is_leader.set(i64::from(leader));
    }

    /// One round: returns whether we hold the lease afterwards, and when a rival's lease will
    /// expire if it is held (`Err` on API failure).
    async fn round(
        &self,
        seen: &mut Option<(Record, Instant)>,
    ) -> Result<(bool, Option<Duration>), RoundError> {
        let lease = self.api.get_opt(&self.name).await?;
        let now = Instant::now();
        let record = lease.as_ref().map(Record::of);
        // Standbys judge expiry by how long the record has not changed on their own clock.
        let unchanged_for = match (&record, seen.as_ref()) {
            (Some(r), Some((old, since))) if old == r => now.duration_since(*since),
            (Some(r), _) => {
                *seen = Some((r.clone(), now));
                Duration::ZERO
            }
            (None, _) => Duration::ZERO,
        };
        let duration = lease
            .as_ref()
            .and_then(|l| l.spec.as_ref())
            .and_then(|s| s.lease_duration_seconds)
            .filter(|s| *s > 0)
            .map(|s| Duration::from_secs(s as u64))
            .unwrap_or(self.timing.duration);
        let step = decide(record.as_ref(), &self.identity, unchanged_for, duration);
        match (step, lease) {
            (Step::Create, _) => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.name.clone()),
                        ..Default::default()
                    },
                    spec: Some(self.held_spec(None, true)),
                };
                match self.api.create(&PostParams::default(), &lease).await {
                    Ok(_) => Ok((true, None)),
                    Err(kube::Error::Api(s)) if s.code == 409 => Ok((false, None)),
                    Err(e) => Err(e.into()),
                }
            }
            (Step::Renew | Step::Acquire, Some(mut lease)) => {
                // The resourceVersion we read makes this a compare-and-swap: a rival's write in
                // between fails ours with 409.
                lease.spec = Some(self.held_spec(lease.spec.as_ref(), step == Step::Acquire));
                match self
                    .api
                    .replace(&self.name, &PostParams::default(), &lease)
                    .await
                {
                    Ok(_) => Ok((true, None)),
                    Err(kube::Error::Api(s)) if s.code == 409 => Ok((false, None)),
                    Err(e) => Err(e.into()),
                }
            }
            _ => Ok((false, Some(duration.saturating_sub(unchanged_for)))),
        }
    }

    /// Gives the lease up so a standby takes over at once.
    async fn release(&self) -> Result<(), RoundError> {
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
            return Ok(());
        };
        let Some(spec) = lease.spec.as_mut() else {
            return Ok(());
        };
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return Ok(());
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(now_micro());
        self.api
            .replace(&self.name, &PostParams::default(), &lease)
            .await?;
        Ok(())
    }

    pub async fn run(self, shutdown: impl std::future::Future<Output = ()>) -> Result<(), Error> {
        tokio::pin!(shutdown);
        let mut seen = None;
        let mut last_renew: Option<Instant> = None;
        loop {
            let started = Instant::now();
            // A round must end before the leader's renew deadline: a black-holed API connection
            // otherwise holds it inside the round, still believing it leads, while a standby
            // takes the expired lease and both write.
            let budget = match last_renew {
                Some(t) if self.leadership.is_leader() => {
                    self.timing.renew_deadline.saturating_sub(t.elapsed())
                }
                _ => self.timing.renew_deadline,
            };
            let result = tokio::select! {
                r = within(budget, self.round(&mut seen)) => r,
                () = &mut shutdown => break,
            };
            let mut pause = self.timing.retry_period;
            match result {
                Ok((true, _)) => {
                    last_renew = Some(started);
                    self.lead(true);
                }
                Ok((false, _)) if self.leadership.is_leader() => {
                    self.lead(false);
                    return Err(Error::Lease(format!(
                        "Lease {} is held by another controller: stopping",
                        self.name
                    )));
                }
                Ok((false, expires_in)) => {
                    // Look again right when a rival's lease would expire, not up to a whole
                    // retry period later: failover takes the lease duration, not more.
                    if let Some(left) = expires_in {
                        pause = pause.min(left + Duration::from_millis(20));
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, lease = %self.name, "leader election round failed");
                }
            }
            if self.leadership.is_leader()
                && last_renew.is_some_and(|t| t.elapsed() > self.timing.renew_deadline)
            {
                self.lead(false);
                return Err(Error::Lease(format!(
                    "could not renew Lease {} for {:?}: stopping so that another controller can lead",
                    self.name, self.timing.renew_deadline
                )));
            }
            tokio::select! {
                () = tokio::time::sleep(pause) => {}
                () = &mut shutdown => break,
            }
        }
        if self.leadership.is_leader() {
            // Stop writing first, then hand over.
            self.lead(false);
            let released = within(self.timing.renew_deadline, self.release()).await;
            if let Err(e) = released {
                tracing::warn!(error = %e, "releasing the Lease failed; a standby takes over when it expires");
            } else {
                tracing::info!(lease = %self.name, "released the Lease");
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(holder: Option<&str>) -> Record {
        Record {
            holder: holder.map(str::to_owned),
            renew_time: Some("t".into()),
            resource_version: Some("1".into()),
        }
    }

    #[test]
    fn decisions() {
        let d = Duration::from_secs(3);
        assert_eq!(decide(None, "me", Duration::ZERO, d), Step::Create);
        assert_eq!(
            decide(Some(&rec(Some("me"))), "me", Duration::ZERO, d),
            Step::Renew
        );
        assert_eq!(
            decide(Some(&rec(None)), "me", Duration::ZERO, d),
            Step::Acquire
        );
        assert_eq!(
            decide(Some(&rec(Some("other"))), "me", Duration::from_secs(2), d),
            Step::Wait
        );
        assert_eq!(decide(Some(&rec(Some("other"))), "me", d, d), Step::Acquire);
    }

    #[test]
    fn records_ignore_empty_holders() {
        let lease = Lease {
            metadata: ObjectMeta::default(),
            spec: Some(LeaseSpec {
                holder_identity: Some(String::new()),
                ..Default::default()
            }),
        };
        assert_eq!(Record::of(&lease).holder, None);
    }

    #[test]
    fn leadership_is_shared() {
        let l = Leadership::new();
        let rx = l.subscribe();
        assert!(!l.is_leader());
        l.clone().set(true);
        assert!(l.is_leader());
        assert!(*rx.borrow());
    }
}
