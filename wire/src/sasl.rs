//! SASL authentication of a fresh connection: SaslHandshake (mechanism negotiation), then the
//! mechanism's SaslAuthenticate rounds for PLAIN, SCRAM-SHA-256/512 and OAUTHBEARER.

use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::{
    SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest,
};
use kafka_protocol::protocol::StrBytes;

use crate::config::SaslMechanism;
use crate::connection::Connection;
use crate::error::{KafkaCode, WireError};
use crate::oauth::TokenSource;
use crate::scram::ScramClient;

/// Authenticates `conn` with `mechanism`. Returns when the broker wants the session
/// re-authenticated (KIP-368), if it does. After the client's first contact with its cluster, a
/// connection lost during the exchange is reported as such (retriable), not as a refusal.
pub async fn authenticate(
    conn: &Connection,
    mechanism: &SaslMechanism,
    tokens: Option<&TokenSource>,
    first_contact: bool,
) -> Result<Option<Instant>, WireError> {
    match exchange(conn, mechanism, tokens).await {
        Err(SaslError {
            lost: Some(lost), ..
        }) if !first_contact => Err(lost),
        Err(SaslError { error, .. }) => Err(error),
        Ok(expiry) => Ok(expiry),
    }
}

/// A failed exchange, and the transport error under it when the connection was lost.
struct SaslError {
    error: WireError,
    lost: Option<WireError>,
}

impl From<WireError> for SaslError {
    fn from(error: WireError) -> SaslError {
        SaslError { error, lost: None }
    }
}

/// `wrap` of a request's error, keeping a lost connection's error beside it.
fn wrapped(e: WireError, wrap: impl FnOnce(String) -> WireError) -> SaslError {
    let lost = matches!(
        e,
        WireError::Disconnected { .. } | WireError::Timeout { .. }
    );
    let error = wrap(e.to_string());
    SaslError {
        error,
        lost: lost.then_some(e),
    }
}

async fn exchange(
    conn: &Connection,
    mechanism: &SaslMechanism,
    tokens: Option<&TokenSource>,
) -> Result<Option<Instant>, SaslError> {
    let name = mechanism.name();
    let handshake = conn
        .send(
            &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str(name)),
            1,
        )
        .await
        .map_err(|e| {
            wrapped(e, |reason| WireError::SaslHandshake {
                broker: conn.broker().to_string(),
                reason,
            })
        })?;
    if handshake.error_code != 0 {
        let offered: Vec<&str> = handshake.mechanisms.iter().map(|m| m.as_str()).collect();
        return Err(SaslError::from(WireError::SaslHandshake {
            broker: conn.broker().to_string(),
            reason: format!(
                "{}: the listener offers {} but not {name}",
                KafkaCode(handshake.error_code).name(),
                if offered.is_empty() {
                    "no mechanism".to_string()
                } else {
                    offered.join(", ")
                }
            ),
        }));
    }
    let failed = |reason: String| WireError::SaslAuthenticate {
        broker: conn.broker().to_string(),
        mechanism: name.to_string(),
        reason,
    };
    let started = Instant::now();
    let last = match mechanism {
        SaslMechanism::Plain { username, password } => {
            let mut message = Vec::with_capacity(username.len() + password.len() + 2);
            message.push(0);
            message.extend_from_slice(username.as_bytes());
            message.push(0);
            message.extend_from_slice(password.as_bytes());
            round(conn, name, message, username).await?
        }
        SaslMechanism::Scram {
            hash,
            username,
            password,
        } => {
            let mut scram = ScramClient::new(*hash, username, password).map_err(failed)?;
            let first = round(conn, name, scram.client_first(), username).await?;
            let client_final = scram.client_final(&first.auth_bytes).map_err(failed)?;
            let last = round(conn, name, client_final, username).await?;
            scram
                .verify_server_final(&last.auth_bytes)
                .map_err(failed)?;
            last
        }
        SaslMechanism::OAuthBearer(oidc) => {
            let tokens = tokens.ok_or_else(|| failed("no token source".into()))?;
            let token = tokens.token().await?;
            round(conn, name, tokens.initial_response(&token), &oidc.client_id).await?
        }
    };
    Ok((last.session_lifetime_ms > 0)
        .then(|| started + Duration::from_millis(last.session_lifetime_ms as u64)))
}

/// One SaslAuthenticate round; a refusal names the principal and carries the broker's message.
async fn round(
    conn: &Connection,
    mechanism: &str,
    auth_bytes: Vec<u8>,
    principal: &str,
) -> Result<SaslAuthenticateResponse, SaslError> {
    let mechanism_error = |reason: String| WireError::SaslAuthenticate {
        broker: conn.broker().to_string(),
        mechanism: mechanism.to_string(),
        reason,
    };
    let response = conn
        .send(
            &SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(auth_bytes)),
            2,
        )
        .await
        .map_err(|e| wrapped(e, mechanism_error))?;
    if response.error_code != 0 {
        let message = response
            .error_message
            .as_ref()
            .map(|m| m.as_str().to_string())
            .unwrap_or_default();
        return Err(SaslError::from(mechanism_error(format!(
            "{} for {principal:?}: {message}",
            KafkaCode(response.error_code).name()
        ))));
    }
    Ok(response)
}
