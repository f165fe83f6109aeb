//! Opt-in leader election with a `coordination.k8s.io/v1` Lease: only the holder runs the
//! controllers. A replica that cannot renew in time exits, so that two leaders never write.
//!
//! No two machines' wall clocks are ever compared. The only order the replicas share is the API
//! server's: every write to the Lease changes its `resourceVersion`, and the writes are
//! compare-and-swaps on it. Every duration is judged on the judging replica's own monotonic clock
//! ([`Instant`]), from the moment it saw a Lease change at the API server:
//!
//! - A standby remembers the Lease record it last read ([`Observed`]) and the instant it first
//!   read it; another replica's lease counts as expired only once that same record has stayed
//!   unchanged for longer than the lease's `leaseDurationSeconds` on the standby's clock (as
//!   client-go does). The holder's `renewTime` is written for people, never read as a deadline.
//! - The holder measures from the instant taken *before* it sent its last successful renewal (the
//!   renewal reached the API server, and so any standby, at or after that instant) and gives up
//!   once [`Election::renew_deadline`], two thirds of the lease duration, has passed since then
//!   ([`lost`]). The other third is margin for the two clocks' rates and for reads in flight.
//!   Every API call is bounded by a timeout, and [`Election::keep`] returns at the deadline even
//!   when a call hangs.

use std::fmt;
use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
use tokio::time::Instant;

/// Lease duration assumed for a Lease whose spec sets none (the Kubernetes default).
const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(15);

/// Lease settings.
#[derive(Debug, Clone)]
pub struct Election {
    /// Lease namespace.
    pub namespace: String,
    /// Lease name.
    pub name: String,
    /// This replica's identity.
    pub identity: String,
    /// How long a lease is valid without renewal.
    pub lease_duration: Duration,
    /// How often the holder renews.
    pub renew_every: Duration,
}

/// The Lease record this replica last read, and the instant (on its monotonic clock) at which it
/// first read that record. Updated from every read with [`Observed::observe`].
#[derive(Debug, Clone, Default)]
pub struct Observed {
    last: Option<Sighting>,
}

#[derive(Debug, Clone)]
struct Sighting {
    resource_version: Option<String>,
    spec: LeaseSpec,
    since: Instant,
}

impl Observed {
    /// Records a read of the Lease (`None`: absent) at `now`. The observation restarts only when
    /// the record changed (another `resourceVersion` or spec), e.g. when the holder renewed.
    pub fn observe(&mut self, lease: Option<&Lease>, now: Instant) {
        let Some(lease) = lease else {
            self.last = None;
            return;
        };
        let resource_version = lease.metadata.resource_version.clone();
        let spec = lease.spec.clone().unwrap_or_default();
        let unchanged = self
            .last
            .as_ref()
            .is_some_and(|s| s.resource_version == resource_version && s.spec == spec);
        if !unchanged {
            self.last = Some(Sighting {
                resource_version,
                spec,
                since: now,
            });
        }
    }
}

/// Whether the lease last observed is free for `identity` at `now`: absent, without holder, held
/// by `identity`, or unchanged on this replica's clock for longer than its `leaseDurationSeconds`.
pub fn available(observed: &Observed, identity: &str, now: Instant) -> bool {
    let Some(seen) = &observed.last else {
        return true;
    };
    let holder = seen.spec.holder_identity.as_deref().unwrap_or("");
    if holder.is_empty() || holder == identity {
        return true;
    }
    let duration = seen
        .spec
        .lease_duration_seconds
        .and_then(|s| u64::try_from(s).ok())
        .filter(|s| *s > 0)
        .map_or(DEFAULT_LEASE_DURATION, Duration::from_secs);
    now.saturating_duration_since(seen.since) > duration
}

/// Whether the holder must give up at `now`: its last successful renewal was sent at `last_sent`
/// and `deadline` has passed since.
pub fn lost(last_sent: Instant, now: Instant, deadline: Duration) -> bool {
    now.saturating_duration_since(last_sent) >= deadline
}

/// An API call that failed or did not answer in time.
#[derive(Debug)]
enum CallError {
    Kube(kube::Error),
    TimedOut(&'static str, Duration),
}

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallError::Kube(e) => e.fmt(f),
            CallError::TimedOut(what, limit) => write!(f, "{what} timed out after {limit:?}"),
        }
    }
}

impl Election {
    /// How long after sending its last successful renewal the holder keeps leading: two thirds
    /// of the lease duration.
    pub fn renew_deadline(&self) -> Duration {
        self.lease_duration * 2 / 3
    }

    /// Limit of a single API call.
    fn call_timeout(&self) -> Duration {
        self.renew_every.max(Duration::from_secs(1))
    }

    /// Delay before the holder retries a renewal that failed.
    fn retry_every(&self) -> Duration {
        self.renew_every / 4
    }

    /// Runs `call`, failing when it takes longer than [`Election::call_timeout`].
    async fn bounded<T>(
        &self,
        what: &'static str,
        call: impl Future<Output = kube::Result<T>>,
    ) -> Result<T, CallError> {
        let limit = self.call_timeout();
        match tokio::time::timeout(limit, call).await {
            Ok(result) => result.map_err(CallError::Kube),
            Err(_) => Err(CallError::TimedOut(what, limit)),
        }
    }

    /// Takes or renews the lease if it is available. Returns the instant taken before sending the
    /// successful write (the lease is valid for others from then on), or `None` when another
    /// replica holds the lease or won the race.
    async fn try_take(
        &self,
        api: &Api<Lease>,
        observed: &mut Observed,
    ) -> Result<Option<Instant>, CallError> {
        // renewTime and acquireTime are for people; no replica reads them as deadlines.
        let now = Timestamp::now();
        let spec = |transitions: i32, acquired: Option<MicroTime>| LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(self.lease_duration.as_secs() as i32),
            acquire_time: acquired.or(Some(MicroTime(now))),
            renew_time: Some(MicroTime(now)),
            lease_transitions: Some(transitions),
            ..Default::default()
        };
        let read = self
            .bounded("reading the lease", api.get_opt(&self.name))
            .await?;
        observed.observe(read.as_ref(), Instant::now());
        match read {
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.name.clone()),
                        ..Default::default()
                    },
                    spec: Some(spec(0, None)),
                };
                let sent = Instant::now();
                match self
                    .bounded(
                        "creating the lease",
                        api.create(&PostParams::default(), &lease),
                    )
                    .await
                {
                    Ok(_) => Ok(Some(sent)),
                    Err(CallError::Kube(kube::Error::Api(s))) if s.code == 409 => Ok(None),
                    Err(e) => Err(e),
                }
            }
            Some(mut lease) => {
                if !available(observed, &self.identity, Instant::now()) {
                    return Ok(None);
                }
                let current = lease.spec.clone().unwrap_or_default();
                let ours = current.holder_identity.as_deref() == Some(self.identity.as_str());
                let transitions = current.lease_transitions.unwrap_or(0) + i32::from(!ours);
                lease.spec = Some(spec(
                    transitions,
                    if ours { current.acquire_time } else { None },
                ));
                let sent = Instant::now();
                // The resourceVersion makes this a compare-and-swap.
                match self
                    .bounded(
                        "writing the lease",
                        api.replace(&self.name, &PostParams::default(), &lease),
                    )
                    .await
                {
                    Ok(_) => Ok(Some(sent)),
                    Err(CallError::Kube(kube::Error::Api(s))) if s.code == 409 => Ok(None),
                    Err(e) => Err(e),
                }
            }
        }
    }

    /// Waits until this replica holds the lease; returns the instant taken before sending the
    /// write that took it, to pass to [`Election::keep`].
    pub async fn acquire(&self, client: &kube::Client) -> Instant {
        let api: Api<Lease> = Api::namespaced(client.clone(), &self.namespace);
        let mut observed = Observed::default();
        loop {
            match self.try_take(&api, &mut observed).await {
                Ok(Some(sent)) => {
                    tracing::info!(lease = %self.name, identity = %self.identity, "became the leader");
                    return sent;
                }
                Ok(None) => {}
                Err(e) => tracing::warn!(error = %e, "lease unavailable"),
            }
            tokio::time::sleep(self.renew_every).await;
        }
    }

    /// Gives the lease up after a graceful stop, so that a standby takes over at its next try
    /// instead of waiting for the lease to expire. Does nothing when another replica holds it.
    pub async fn release(&self, client: &kube::Client) {
        let api: Api<Lease> = Api::namespaced(client.clone(), &self.namespace);
        let result = async {
            let Some(mut lease) = self
                .bounded("reading the lease", api.get_opt(&self.name))
                .await?
            else {
                return Ok(false);
            };
            let Some(spec) = lease.spec.as_mut() else {
                return Ok(false);
            };
            if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
                return Ok(false);
            }
            spec.holder_identity = None;
            // The resourceVersion makes this a compare-and-swap.
            self.bounded(
                "writing the lease",
                api.replace(&self.name, &PostParams::default(), &lease),
            )
            .await
            .map(|_| true)
        }
        .await;
        match result {
            Ok(true) => tracing::info!(lease = %self.name, "released the lease"),
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(error = %e, "could not release the lease; it expires on its own")
            }
        }
    }

    /// Renews the lease taken at `acquired` (as returned by [`Election::acquire`]); returns only
    /// when leadership is lost (the caller must stop), at the latest [`Election::renew_deadline`]
    /// after the last successful renewal was sent, even when an API call hangs.
    pub async fn keep(&self, client: &kube::Client, acquired: Instant) {
        let api: Api<Lease> = Api::namespaced(client.clone(), &self.namespace);
        let mut observed = Observed::default();
        let deadline = self.renew_deadline();
        let mut last_sent = acquired;
        let mut next = acquired + self.renew_every;
        loop {
            let give_up = last_sent + deadline;
            tokio::time::sleep_until(next.min(give_up)).await;
            if lost(last_sent, Instant::now(), deadline) {
                tracing::error!("could not renew the lease in time");
                return;
            }
            match tokio::time::timeout_at(give_up, self.try_take(&api, &mut observed)).await {
                Ok(Ok(Some(sent))) => {
                    last_sent = sent;
                    next = sent + self.renew_every;
                }
                Ok(Ok(None)) => {
                    tracing::error!("lost the lease to another replica");
                    return;
                }
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "could not renew the lease");
                    next = Instant::now() + self.retry_every();
                }
                Err(_) => {
                    tracing::error!("could not renew the lease in time: the API server hangs");
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    fn lease(version: &str, holder: Option<&str>, renewed: i64) -> Lease {
        Lease {
            metadata: ObjectMeta {
                name: Some("kmirror-operator".into()),
                resource_version: Some(version.into()),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: holder.map(Into::into),
                lease_duration_seconds: Some(15),
                renew_time: Some(MicroTime(Timestamp::from_second(renewed).unwrap())),
                ..Default::default()
            }),
        }
    }

    /// Reads of the Lease (`None`: absent), each with the seconds after the start it happened.
    type Reads = Vec<(Option<Lease>, u32)>;

    #[test]
    fn availability_follows_the_local_observation() {
        let t0 = Instant::now();
        // (case, reads as (lease, seconds after t0), identity, now in seconds after t0, expected)
        let cases: &[(&str, Reads, &str, u32, bool)] = &[
            ("nothing observed", vec![], "b", 0, true),
            ("absent lease", vec![(None, 0)], "b", 0, true),
            (
                "empty holder",
                vec![(Some(lease("1", Some(""), 1_000)), 0)],
                "b",
                0,
                true,
            ),
            (
                "no holder",
                vec![(Some(lease("1", None, 1_000)), 0)],
                "b",
                0,
                true,
            ),
            (
                "own lease",
                vec![(Some(lease("1", Some("a"), 1_000)), 0)],
                "a",
                0,
                true,
            ),
            (
                "unchanged for less than the duration",
                vec![(Some(lease("1", Some("a"), 1_000)), 0)],
                "b",
                14,
                false,
            ),
            (
                "unchanged for exactly the duration",
                vec![(Some(lease("1", Some("a"), 1_000)), 0)],
                "b",
                15,
                false,
            ),
            (
                "unchanged for longer than the duration",
                vec![(Some(lease("1", Some("a"), 1_000)), 0)],
                "b",
                16,
                true,
            ),
            (
                "re-reading the same record keeps the first sighting",
                vec![
                    (Some(lease("1", Some("a"), 1_000)), 0),
                    (Some(lease("1", Some("a"), 1_000)), 10),
                ],
                "b",
                16,
                true,
            ),
            (
                "a renewal restarts the observation",
                vec![
                    (Some(lease("1", Some("a"), 1_000)), 0),
                    (Some(lease("2", Some("a"), 1_010)), 10),
                ],
                "b",
                16,
                false,
            ),
            (
                "a restarted observation expires after the duration",
                vec![
                    (Some(lease("1", Some("a"), 1_000)), 0),
                    (Some(lease("2", Some("a"), 1_010)), 10),
                ],
                "b",
                26,
                true,
            ),
            (
                "a new resourceVersion alone restarts the observation",
                vec![
                    (Some(lease("1", Some("a"), 1_000)), 0),
                    (Some(lease("2", Some("a"), 1_000)), 10),
                ],
                "b",
                16,
                false,
            ),
            (
                // Written by a clock far behind: only the local observation counts.
                "a renewTime far in the past does not expire the lease",
                vec![(Some(lease("1", Some("a"), 0)), 0)],
                "b",
                1,
                false,
            ),
            (
                "a lease gone and recreated restarts the observation",
                vec![
                    (Some(lease("1", Some("a"), 1_000)), 0),
                    (None, 5),
                    (Some(lease("1", Some("a"), 1_000)), 10),
                ],
                "b",
                16,
                false,
            ),
        ];
        for (case, reads, identity, now, expected) in cases {
            let mut observed = Observed::default();
            for (read, at) in reads {
                observed.observe(read.as_ref(), t0 + *at * SECOND);
            }
            assert_eq!(
                available(&observed, identity, t0 + *now * SECOND),
                *expected,
                "{case}"
            );
        }
    }

    #[test]
    fn the_lease_duration_comes_from_the_spec() {
        let t0 = Instant::now();
        // (leaseDurationSeconds, seconds observed, expected)
        let cases = [
            (Some(5), 4, false),
            (Some(5), 6, true),
            (Some(60), 30, false),
            (None, 14, false),
            (None, 16, true),
            (Some(0), 14, false),
            (Some(-1), 16, true),
        ];
        let cases: [(Option<i32>, u32, bool); 7] = cases;
        for (seconds, after, expected) in cases {
            let mut read = lease("1", Some("a"), 1_000);
            read.spec.as_mut().unwrap().lease_duration_seconds = seconds;
            let mut observed = Observed::default();
            observed.observe(Some(&read), t0);
            assert_eq!(
                available(&observed, "b", t0 + after * SECOND),
                expected,
                "{seconds:?} after {after}s"
            );
        }
    }

    #[test]
    fn the_holder_gives_up_at_the_renew_deadline() {
        let sent = Instant::now();
        let deadline = 10 * SECOND;
        // (milliseconds after the last successful renewal was sent, expected)
        let cases = [(0, false), (9_999, false), (10_000, true), (15_000, true)];
        for (after, expected) in cases {
            let now = sent + Duration::from_millis(after);
            assert_eq!(lost(sent, now, deadline), expected, "{after}ms");
        }
        // A clock read before the send (a renewal completing early) is not lost.
        assert!(!lost(sent + SECOND, sent, deadline));
    }

    /// A client for an API server that accepts connections and never answers.
    async fn hanging_api_server() -> (kube::Client, tokio::task::JoinHandle<()>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let server = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((socket, _)) = listener.accept().await {
                held.push(socket);
            }
        });
        let config = kube::Config::new(url.parse().unwrap());
        (kube::Client::try_from(config).unwrap(), server)
    }

    fn election(lease_duration: Duration) -> Election {
        Election {
            namespace: "default".into(),
            name: "kmirror-operator".into(),
            identity: "a".into(),
            lease_duration,
            renew_every: lease_duration / 3,
        }
    }

    #[tokio::test]
    async fn keep_returns_by_the_deadline_when_the_api_server_hangs() {
        let (client, server) = hanging_api_server().await;
        let election = election(Duration::from_millis(600));
        let acquired = Instant::now();
        election.keep(&client, acquired).await;
        let returned = acquired.elapsed();
        assert!(returned >= election.renew_deadline(), "{returned:?}");
        assert!(
            returned < election.renew_deadline() + Duration::from_millis(300),
            "{returned:?}"
        );
        server.abort();
    }

    #[tokio::test]
    async fn release_gives_up_when_the_api_server_hangs() {
        let (client, server) = hanging_api_server().await;
        let election = election(Duration::from_millis(600));
        let started = Instant::now();
        election.release(&client).await;
        let returned = started.elapsed();
        // The read hung until its timeout.
        assert!(returned >= election.call_timeout(), "{returned:?}");
        assert!(
            returned < election.call_timeout() + Duration::from_millis(300),
            "{returned:?}"
        );
        server.abort();
    }

    #[test]
    fn the_renew_deadline_leaves_margin_before_the_lease_expires() {
        for seconds in [3, 15, 60] {
            let election = Election {
                namespace: "default".into(),
                name: "kmirror-operator".into(),
                identity: "a".into(),
                lease_duration: seconds * SECOND,
                renew_every: (seconds / 3) * SECOND,
            };
            let deadline = election.renew_deadline();
            assert_eq!(deadline, seconds * SECOND * 2 / 3);
            assert!(deadline < election.lease_duration);
            assert!(deadline > election.renew_every, "{seconds}s: room to renew");
            assert!(election.retry_every() < election.renew_every);
        }
    }
}
