//! TLS client setup with rustls: trusted CAs (a PEM file or the system store), an optional client
//! certificate for mutual TLS, and certificate/hostname verification as configured.

use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};

use crate::config::{PemSource, TlsSettings};
use crate::error::WireError;

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn tls_error(what: &str, reason: impl std::fmt::Display) -> WireError {
    WireError::Tls {
        broker: what.to_string(),
        reason: reason.to_string(),
    }
}

fn pem_bytes(source: &PemSource, key: &str) -> Result<Vec<u8>, WireError> {
    match source {
        PemSource::File(path) => std::fs::read(path)
            .map_err(|e| WireError::config(key, format!("cannot read {}: {e}", path.display()))),
        PemSource::Inline(text) => Ok(text.as_bytes().to_vec()),
    }
}

fn certificates(source: &PemSource, key: &str) -> Result<Vec<CertificateDer<'static>>, WireError> {
    let pem = pem_bytes(source, key)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| WireError::config(key, format!("not PEM certificates: {e}")))?;
    if certs.is_empty() {
        return Err(WireError::config(key, "holds no PEM certificate"));
    }
    Ok(certs)
}

fn private_key(source: &PemSource, key: &str) -> Result<PrivateKeyDer<'static>, WireError> {
    let pem = pem_bytes(source, key)?;
    if String::from_utf8_lossy(&pem).contains("ENCRYPTED") {
        return Err(WireError::config(
            key,
            "the private key is encrypted; the wire client needs an unencrypted key",
        ));
    }
    // The error text of the PEM parser never includes key material.
    PrivateKeyDer::from_pem_slice(&pem)
        .map_err(|e| WireError::config(key, format!("no usable PEM private key: {e}")))
}

fn roots(ca: Option<&PemSource>, key: &str) -> Result<RootCertStore, WireError> {
    let mut store = RootCertStore::empty();
    match ca {
        Some(ca) => {
            for cert in certificates(ca, key)? {
                store
                    .add(cert)
                    .map_err(|e| WireError::config(key, format!("bad CA: {e}")))?;
            }
        }
        None => {
            let native = rustls_native_certs::load_native_certs();
            for cert in native.certs {
                // Unparseable system certificates are skipped, as OpenSSL does.
                let _ = store.add(cert);
            }
            if store.is_empty() {
                return Err(WireError::config(
                    key,
                    "not set and the system trust store holds no certificate",
                ));
            }
        }
    }
    Ok(store)
}

/// Builds the rustls client configuration for `settings`.
pub fn client_config(settings: &TlsSettings) -> Result<Arc<rustls::ClientConfig>, WireError> {
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| tls_error("configuration", e))?;
    let verifier: Arc<dyn ServerCertVerifier> = if settings.verify_certificate {
        let webpki = WebPkiServerVerifier::builder_with_provider(
            Arc::new(roots(settings.ca.as_ref(), "ssl.ca.location")?),
            provider(),
        )
        .build()
        .map_err(|e| tls_error("configuration", e))?;
        if settings.verify_hostname {
            webpki
        } else {
            Arc::new(ChainOnly(webpki))
        }
    } else {
        Arc::new(NoVerification(provider()))
    };
    let builder = builder
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    let config = match (&settings.certificate, &settings.key) {
        (Some(cert), Some(key)) => builder
            .with_client_auth_cert(
                certificates(cert, "ssl.certificate.location")?,
                private_key(key, "ssl.key.location")?,
            )
            .map_err(|e| {
                WireError::config(
                    "ssl.key.location",
                    format!("does not fit the certificate: {e}"),
                )
            })?,
        _ => builder.with_no_client_auth(),
    };
    Ok(Arc::new(config))
}

/// A TLS configuration for an `https://` OAuth endpoint: `ca` or the system's trust store, full
/// verification.
pub fn https_client_config(ca: Option<&PemSource>) -> Result<Arc<rustls::ClientConfig>, WireError> {
    let config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| tls_error("configuration", e))?
        .with_root_certificates(roots(ca, "https.ca.location")?)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// The server name to verify for `host` (a DNS name or an IP address).
pub fn server_name(host: &str) -> Result<ServerName<'static>, WireError> {
    ServerName::try_from(
        host.trim_start_matches('[')
            .trim_end_matches(']')
            .to_string(),
    )
    .map_err(|e| tls_error(host, format!("not a valid server name: {e}")))
}

/// Verifies the chain but accepts any name (`ssl.endpoint.identification.algorithm=none`).
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// Accepts any certificate (`enable.ssl.certificate.verification=false`); signatures are still
/// checked so the handshake is with the holder of the presented key.
#[derive(Debug)]
struct NoVerification(Arc<CryptoProvider>);

impl ServerCertVerifier for NoVerification {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
