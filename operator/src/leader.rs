//! Opt-in leader election with a `coordination.k8s.io/v1` Lease: only the holder runs the
//! controllers. A replica that cannot renew in time exits, so that two leaders never write.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::Api;
use kube::api::{ObjectMeta, PostParams};

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

/// Whether a lease is free for `identity` at `now`: absent holder, own lease, or expired.
pub fn available(spec: &LeaseSpec, identity: &str, now: Timestamp) -> bool {
    let holder = spec.holder_identity.as_deref().unwrap_or("");
    if holder.is_empty() || holder == identity {
        return true;
    }
    let duration = SignedDuration::from_secs(i64::from(spec.lease_duration_seconds.unwrap_or(15)));
    match &spec.renew_time {
        Some(MicroTime(t)) => *t + duration < now,
        None => true,
    }
}

impl Election {
    async fn try_take(&self, api: &Api<Lease>) -> kube::Result<bool> {
        let now = Timestamp::now();
        let spec = |transitions: i32, acquired: Option<MicroTime>| LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(self.lease_duration.as_secs() as i32),
            acquire_time: acquired.or(Some(MicroTime(now))),
            renew_time: Some(MicroTime(now)),
            lease_transitions: Some(transitions),
            ..Default::default()
        };
        match api.get_opt(&self.name).await? {
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.name.clone()),
                        ..Default::default()
                    },
                    spec: Some(spec(0, None)),
                };
                match api.create(&PostParams::default(), &lease).await {
                    Ok(_) => Ok(true),
                    Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                    Err(e) => Err(e),
                }
            }
            Some(mut lease) => {
                let current = lease.spec.clone().unwrap_or_default();
                if !available(&current, &self.identity, now) {
                    return Ok(false);
                }
                let ours = current.holder_identity.as_deref() == Some(self.identity.as_str());
                let transitions = current.lease_transitions.unwrap_or(0) + i32::from(!ours);
                lease.spec = Some(spec(
                    transitions,
                    if ours { current.acquire_time } else { None },
                ));
                // The resourceVersion makes this a compare-and-swap.
                match api
                    .replace(&self.name, &PostParams::default(), &lease)
                    .await
                {
                    Ok(_) => Ok(true),
                    Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                    Err(e) => Err(e),
                }
            }
        }
    }

    /// Waits until this replica holds the lease.
    pub async fn acquire(&self, client: &kube::Client) {
        let api: Api<Lease> = Api::namespaced(client.clone(), &self.namespace);
        loop {
            match self.try_take(&api).await {
                Ok(true) => {
                    tracing::info!(lease = %self.name, identity = %self.identity, "became the leader");
                    return;
                }
                Ok(false) => {}
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
            let Some(mut lease) = api.get_opt(&self.name).await? else {
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
            api.replace(&self.name, &PostParams::default(), &lease)
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

    /// Renews the lease forever; returns only when leadership is lost (the caller must stop).
    pub async fn keep(&self, client: &kube::Client) {
        let api: Api<Lease> = Api::namespaced(client.clone(), &self.namespace);
        let mut last_renewal = std::time::Instant::now();
        loop {
            tokio::time::sleep(self.renew_every).await;
            match self.try_take(&api).await {
                Ok(true) => last_renewal = std::time::Instant::now(),
                Ok(false) => {
                    tracing::error!("lost the lease to another replica");
                    return;
                }
                Err(e) => tracing::warn!(error = %e, "could not renew the lease"),
            }
            // Give up before the lease can expire for others.
            if last_renewal.elapsed() + self.renew_every >= self.lease_duration {
                tracing::error!("could not renew the lease in time");
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expired_or_own_leases_are_available() {
        let now = Timestamp::from_second(1_000).unwrap();
        let held = |secs_ago: i64| LeaseSpec {
            holder_identity: Some("a".into()),
            lease_duration_seconds: Some(15),
            renew_time: Some(MicroTime(Timestamp::from_second(1_000 - secs_ago).unwrap())),
            ..Default::default()
        };
        assert!(available(&LeaseSpec::default(), "b", now));
        assert!(available(&held(5), "a", now), "own lease");
        assert!(!available(&held(5), "b", now), "held by another");
        assert!(available(&held(16), "b", now), "expired");
    }
}
