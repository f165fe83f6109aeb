//! OAUTHBEARER tokens from an OIDC client-credentials endpoint, cached until shortly before they
//! expire, and the SASL OAUTHBEARER initial message (RFC 7628) that carries them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD as B64, URL_SAFE_NO_PAD as B64URL};
use tokio::sync::Mutex;

use crate::config::OidcSettings;
use crate::error::WireError;
use crate::http::{self, Url, form_encode};

/// A bearer token (never printed).
#[derive(Clone)]
pub struct Token {
    value: String,
    /// When the token should be replaced (80 % of its lifetime).
    refresh_at: Instant,
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

/// Fetches and caches tokens for one client.
pub struct TokenSource {
    settings: OidcSettings,
    url: Url,
    tls: Option<Arc<rustls::ClientConfig>>,
    timeout: Duration,
    cached: Mutex<Option<Token>>,
}

impl TokenSource {
    /// A source for `settings`; requests give up after `timeout`.
    pub fn new(settings: &OidcSettings, timeout: Duration) -> Result<TokenSource, WireError> {
        let url = Url::parse(&settings.token_endpoint)
            .map_err(|e| WireError::config("sasl.oauthbearer.token.endpoint.url", e))?;
        let tls = if url.https {
            Some(crate::tls::https_client_config(settings.https_ca.as_ref())?)
        } else {
            None
        };
        Ok(TokenSource {
            settings: settings.clone(),
            url,
            tls,
            timeout,
            cached: Mutex::new(None),
        })
    }

    fn failure(&self, reason: impl Into<String>) -> WireError {
        WireError::OAuthToken {
            endpoint: self.settings.token_endpoint.clone(),
            reason: reason.into(),
        }
    }

    /// A valid token: the cached one, or a fresh one from the endpoint.
    pub async fn token(&self) -> Result<String, WireError> {
        let mut cached = self.cached.lock().await;
        if let Some(token) = cached.as_ref()
            && Instant::now() < token.refresh_at
        {
            return Ok(token.value.clone());
        }
        let token = self.request().await?;
        let value = token.value.clone();
        *cached = Some(token);
        Ok(value)
    }

    async fn request(&self) -> Result<Token, WireError> {
        let mut body = "grant_type=client_credentials".to_string();
        if let Some(scope) = &self.settings.scope {
            body.push_str("&scope=");
            body.push_str(&form_encode(scope));
        }
        let basic = B64.encode(format!(
            "{}:{}",
            form_encode(&self.settings.client_id),
            form_encode(&self.settings.client_secret)
        ));
        let response = http::post_form(
            &self.url,
            &body,
            &[("Authorization", format!("Basic {basic}"))],
            self.tls.clone(),
            self.timeout,
        )
        .await
        .map_err(|e| self.failure(e))?;
        let json: serde_json::Value = serde_json::from_slice(&response.body)
            .map_err(|_| self.failure(format!("HTTP {}: the body is not JSON", response.status)))?;
        if response.status != 200 {
            // `error` is an OAuth error code such as invalid_client; it holds no secret.
            let code = json
                .get("error")
                .and_then(|e| e.as_str())
                .unwrap_or("no error code");
            return Err(self.failure(format!(
                "HTTP {}: {code} (client id {})",
                response.status, self.settings.client_id
            )));
        }
        let value = json
            .get("access_token")
            .and_then(|t| t.as_str())
            .filter(|t| !t.is_empty())
            .ok_or_else(|| self.failure("the response has no access_token"))?
            .to_string();
        let lifetime = json
            .get("expires_in")
            .and_then(|v| v.as_u64())
            .map(Duration::from_secs)
            .or_else(|| jwt_lifetime(&value))
            .unwrap_or(Duration::from_secs(300));
        Ok(Token {
            value,
            refresh_at: Instant::now() + lifetime.mul_f64(0.8),
        })
    }

    /// The SASL OAUTHBEARER client message for a token.
    pub fn initial_response(&self, token: &str) -> Vec<u8> {
        initial_response(token, &self.settings.extensions)
    }
}

/// `n,,\x01auth=Bearer <token>\x01[key=value\x01]...\x01` (RFC 7628, Kafka's KIP-342 extensions).
pub fn initial_response(token: &str, extensions: &[(String, String)]) -> Vec<u8> {
    let mut message = format!("n,,\u{1}auth=Bearer {token}\u{1}");
    for (k, v) in extensions {
        message.push_str(&format!("{k}={v}\u{1}"));
    }
    message.push('\u{1}');
    message.into_bytes()
}

/// The remaining lifetime of a JWT from its `exp` claim, when the endpoint gave no `expires_in`.
fn jwt_lifetime(token: &str) -> Option<Duration> {
    let payload = token.split('.').nth(1)?;
    let claims: serde_json::Value = serde_json::from_slice(&B64URL.decode(payload).ok()?).ok()?;
    let exp = claims.get("exp")?.as_u64()?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?
        .as_secs();
    Some(Duration::from_secs(exp.saturating_sub(now)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn initial_response_format() {
        assert_eq!(
            initial_response("abc", &[]),
            b"n,,\x01auth=Bearer abc\x01\x01"
        );
        let ext = vec![("logicalCluster".to_string(), "lc-1".to_string())];
        assert_eq!(
            initial_response("abc", &ext),
            b"n,,\x01auth=Bearer abc\x01logicalCluster=lc-1\x01\x01"
        );
    }

    #[test]
    fn jwt_expiry_is_read() {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let claims = B64URL.encode(format!("{{\"exp\":{}}}", now + 600));
        let lifetime = jwt_lifetime(&format!("h.{claims}.s")).unwrap();
        assert!(lifetime > Duration::from_secs(590) && lifetime <= Duration::from_secs(600));
        assert!(jwt_lifetime("opaque-token").is_none());
    }
}
