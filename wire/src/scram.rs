//! The client side of SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802, RFC 7677) with ring's HMAC and
//! PBKDF2: client-first message, proof from the server's salt and iterations, and the check of
//! the server's signature.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use ring::{digest, hmac, pbkdf2};

use crate::config::ScramHash;

/// Kafka's smallest allowed iteration count; the largest we accept bounds the work a server can
/// make us do.
const MIN_ITERATIONS: u32 = 4096;
const MAX_ITERATIONS: u32 = 1_000_000;

/// A SCRAM exchange in progress. Errors are short protocol descriptions without secrets.
pub struct ScramClient {
    hash: ScramHash,
    password: String,
    client_nonce: String,
    client_first_bare: String,
    server_signature: Option<Vec<u8>>,
}

impl ScramClient {
    /// Starts an exchange for `username` with a fresh random nonce.
    pub fn new(hash: ScramHash, username: &str, password: &str) -> Result<ScramClient, String> {
        let mut raw = [0u8; 24];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut raw)
            .map_err(|_| "no random numbers for the SCRAM nonce".to_string())?;
        Ok(ScramClient::with_nonce(
            hash,
            username,
            password,
            &B64.encode(raw),
        ))
    }

    /// Starts an exchange with a given nonce (for known test vectors).
    pub fn with_nonce(hash: ScramHash, username: &str, password: &str, nonce: &str) -> ScramClient {
        let name = username.replace('=', "=3D").replace(',', "=2C");
        ScramClient {
            hash,
            password: password.to_string(),
            client_nonce: nonce.to_string(),
            client_first_bare: format!("n={name},r={nonce}"),
            server_signature: None,
        }
    }

    /// The client-first message.
    pub fn client_first(&self) -> Vec<u8> {
        format!("n,,{}", self.client_first_bare).into_bytes()
    }

    fn algorithms(
        &self,
    ) -> (
        pbkdf2::Algorithm,
        hmac::Algorithm,
        &'static digest::Algorithm,
    ) {
        match self.hash {
            ScramHash::Sha256 => (
                pbkdf2::PBKDF2_HMAC_SHA256,
                hmac::HMAC_SHA256,
                &digest::SHA256,
            ),
            ScramHash::Sha512 => (
                pbkdf2::PBKDF2_HMAC_SHA512,
                hmac::HMAC_SHA512,
                &digest::SHA512,
            ),
        }
    }

    /// Answers the server-first message with the client-final message (carrying the proof).
    pub fn client_final(&mut self, server_first: &[u8]) -> Result<Vec<u8>, String> {
        let server_first = std::str::from_utf8(server_first)
            .map_err(|_| "the server-first message is not UTF-8".to_string())?;
        let mut nonce = None;
        let mut salt = None;
        let mut iterations = None;
        for attribute in server_first.split(',') {
            match attribute.split_once('=') {
                Some(("r", v)) => nonce = Some(v),
                Some(("s", v)) => salt = Some(v),
                Some(("i", v)) => iterations = Some(v),
                Some(("e", v)) => return Err(format!("the server refused: {v}")),
                Some(("m", _)) => return Err("the server requires an unknown extension".into()),
                _ => {}
            }
        }
        let (Some(nonce), Some(salt), Some(iterations)) = (nonce, salt, iterations) else {
            return Err("the server-first message lacks the nonce, salt or iterations".into());
        };
        if !nonce.starts_with(&self.client_nonce) || nonce.len() == self.client_nonce.len() {
            return Err("the server nonce does not extend the client nonce".into());
        }
        let salt = B64
            .decode(salt)
            .map_err(|_| "the salt is not base64".to_string())?;
        let iterations: u32 = iterations
            .parse()
            .map_err(|_| "the iteration count is not a number".to_string())?;
        if !(MIN_ITERATIONS..=MAX_ITERATIONS).contains(&iterations) {
            return Err(format!(
                "the iteration count {iterations} is outside {MIN_ITERATIONS}..={MAX_ITERATIONS}"
            ));
        }

        let (kdf, mac, hash) = self.algorithms();
        let mut salted = vec![0u8; hash.output_len()];
        pbkdf2::derive(
            kdf,
            std::num::NonZeroU32::new(iterations).expect("checked above"),
            &salt,
            self.password.as_bytes(),
            &mut salted,
        );
        let salted_key = hmac::Key::new(mac, &salted);
        let client_key = hmac::sign(&salted_key, b"Client Key");
        let stored_key = digest::digest(hash, client_key.as_ref());
        let without_proof = format!("c=biws,r={nonce}");
        let auth_message = format!("{},{server_first},{without_proof}", self.client_first_bare);
        let client_signature = hmac::sign(
            &hmac::Key::new(mac, stored_key.as_ref()),
            auth_message.as_bytes(),
        );
        let proof: Vec<u8> = client_key
            .as_ref()
            .iter()
            .zip(client_signature.as_ref())
            .map(|(a, b)| a ^ b)
            .collect();
        let server_key = hmac::sign(&salted_key, b"Server Key");
        self.server_signature = Some(
            hmac::sign(
                &hmac::Key::new(mac, server_key.as_ref()),
                auth_message.as_bytes(),
            )
            .as_ref()
            .to_vec(),
        );
        Ok(format!("{without_proof},p={}", B64.encode(proof)).into_bytes())
    }

    /// Checks the server-final message: the server proved it knows the password too.
    pub fn verify_server_final(&self, server_final: &[u8]) -> Result<(), String> {
        let text = std::str::from_utf8(server_final)
            .map_err(|_| "the server-final message is not UTF-8".to_string())?;
        let expected = self
            .server_signature
            .as_ref()
            .ok_or_else(|| "server-final before client-final".to_string())?;
        for attribute in text.split(',') {
            match attribute.split_once('=') {
                Some(("e", v)) => return Err(format!("the server refused: {v}")),
                Some(("v", v)) => {
                    let got = B64
                        .decode(v)
                        .map_err(|_| "the server signature is not base64".to_string())?;
                    return if constant_time_eq(&got, expected) {
                        Ok(())
                    } else {
                        Err("the server signature does not match (not the real broker?)".into())
                    };
                }
                _ => {}
            }
        }
        Err("the server-final message has no signature".into())
    }
}

/// Compares without stopping at the first difference.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7677 section 3.
    #[test]
    fn rfc7677_sha256_vector() {
        let mut c =
            ScramClient::with_nonce(ScramHash::Sha256, "user", "pencil", "rOprNGfwEbeRWgbNEkqO");
        assert_eq!(c.client_first(), b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO");
        let server_first = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
        let client_final = c.client_final(server_first).unwrap();
        assert_eq!(
            String::from_utf8(client_final).unwrap(),
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
        );
        c.verify_server_final(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
            .unwrap();
        assert!(
            c.verify_server_final(b"v=AAAATRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
                .is_err()
        );
        assert!(c.verify_server_final(b"e=invalid-proof").is_err());
    }

    /// The same exchange with SHA-512; expected values computed independently with Python's
    /// hashlib/hmac (pbkdf2_hmac('sha512', ...)).
    #[test]
    fn sha512_vector() {
        let mut c =
            ScramClient::with_nonce(ScramHash::Sha512, "user", "pencil", "rOprNGfwEbeRWgbNEkqO");
        let server_first = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
        let client_final = String::from_utf8(c.client_final(server_first).unwrap()).unwrap();
        assert_eq!(client_final, SHA512_CLIENT_FINAL);
        c.verify_server_final(SHA512_SERVER_FINAL.as_bytes())
            .unwrap();
    }

    const SHA512_CLIENT_FINAL: &str = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
        p=gMGXRcevScNtxZ6/8lQYpGtnsNAc3mGcmNomv+xnoOMw+3R2xNJdMNnzMlTN8PPC6wdp6dybEmDYXYTxwnYPJQ==";
    const SHA512_SERVER_FINAL: &str = "v=ZQnYEgWQMFmmsM8aQMF0nDDCy/AgCzkwk8CmMZYcMg0vSVlKDanekLtifDSeVGT4+5ZxXnJq199RVG2rR7N7Zw==";

    #[test]
    fn names_are_escaped_and_bad_servers_refused() {
        let mut c = ScramClient::with_nonce(ScramHash::Sha256, "a=b,c", "pw", "abc");
        assert_eq!(c.client_first(), b"n,,n=a=3Db=2Cc,r=abc");
        assert!(
            c.client_final(b"r=xyz123,s=AAAA,i=4096")
                .unwrap_err()
                .contains("nonce")
        );
        assert!(
            c.client_final(b"r=abc123,s=AAAA,i=10")
                .unwrap_err()
                .contains("iteration")
        );
        assert!(
            c.client_final(b"e=unknown-user")
                .unwrap_err()
                .contains("unknown-user")
        );
    }
}
