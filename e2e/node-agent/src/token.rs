//! Service-account tokens for projected volumes, requested with the TokenRequest API and bound
//! to the pod (so they stop working once the pod is gone), refreshed after 80 % of their
//! lifetime as a kubelet does.

use std::collections::BTreeMap;

use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::PostParams;
use kube::{Api, Client};

use crate::payload::{TokenKey, Tokens};

#[derive(Debug, Clone)]
struct Issued {
    token: String,
    refresh_at: Timestamp,
}

/// The tokens of one pod.
#[derive(Debug, Default)]
pub struct TokenCache {
    issued: BTreeMap<TokenKey, Issued>,
}

impl TokenCache {
    /// Requests every token in `keys` that is missing or due for refresh; returns whether any
    /// token changed.
    pub async fn refresh(
        &mut self,
        client: &Client,
        pod: &Pod,
        keys: &[TokenKey],
    ) -> Result<bool, kube::Error> {
        let now = Timestamp::now();
        let mut changed = false;
        self.issued.retain(|k, _| keys.contains(k));
        for key in keys {
            if self.issued.get(key).is_some_and(|i| i.refresh_at > now) {
                continue;
            }
            let issued = request(client, pod, key).await?;
            self.issued.insert(key.clone(), issued);
            changed = true;
        }
        Ok(changed)
    }

    /// The current tokens.
    pub fn tokens(&self) -> Tokens {
        self.issued
            .iter()
            .map(|(k, i)| (k.clone(), i.token.clone()))
            .collect()
    }
}

async fn request(client: &Client, pod: &Pod, key: &TokenKey) -> Result<Issued, kube::Error> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let account = pod
        .spec
        .as_ref()
        .and_then(|s| s.service_account_name.as_deref())
        .filter(|s| !s.is_empty())
        .unwrap_or("default");
    let api: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            audiences: (!key.audience.is_empty()).then(|| vec![key.audience.clone()]),
            expiration_seconds: Some(key.expiration_seconds),
            bound_object_ref: Some(BoundObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: pod.metadata.name.clone(),
                uid: pod.metadata.uid.clone(),
            }),
        }),
        ..Default::default()
    };
    let issued_at = Timestamp::now();
    let response = api
        .create_token_request(account, &PostParams::default(), &request)
        .await?;
    let status = response.status.unwrap_or_default();
    let token = status.token.unwrap_or_default();
    let lifetime = match status.expiration_timestamp {
        Some(expires) => expires.0.duration_since(issued_at),
        None => SignedDuration::from_secs(key.expiration_seconds),
    };
    let refresh_at = issued_at + SignedDuration::from_secs_f64(lifetime.as_secs_f64() * 0.8);
    Ok(Issued { token, refresh_at })
}
