//! One authenticated connection to one broker: TCP (and TLS), ApiVersions, SASL, then requests
//! pipelined with correlation ids. A writer task sends frames in the order they were queued; a
//! reader task hands each response to the request that waits for it. Any I/O error or request
//! timeout closes the connection and fails every outstanding request with the same reason.
//!
//! Closing is abortive (`SO_LINGER` 0): what the kernel still holds of an abandoned connection is
//! dropped, not sent later — a request given up on (timed out, or its client fenced) can never
//! reach the broker after the connection ended. A fenced client's writer puts no further frame on
//! the wire ([`Fence`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, RequestHeader, ResponseHeader,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot, watch};

use crate::config::WireConfig;
use crate::error::{KafkaCode, WireError};
use crate::oauth::TokenSource;

/// Highest version of each API this client speaks (semantics checked for every version up to
/// it); the version used is the highest both sides support.
pub(crate) fn client_max_version(key: i16) -> i16 {
    match ApiKey::try_from(key) {
        Ok(ApiKey::Produce) => 13,
        Ok(ApiKey::Fetch) => 17,
        Ok(ApiKey::ListOffsets) => 10,
        Ok(ApiKey::Metadata) => 12,
        Ok(ApiKey::ApiVersions) => 3,
        Ok(ApiKey::SaslHandshake) => 1,
        Ok(ApiKey::SaslAuthenticate) => 2,
        Ok(ApiKey::InitProducerId) => 5,
        Ok(ApiKey::OffsetForLeaderEpoch) => 4,
        _ => -1,
    }
}

/// The API's name for messages.
pub(crate) fn api_name(key: i16) -> &'static str {
    match ApiKey::try_from(key) {
        Ok(ApiKey::Produce) => "Produce",
        Ok(ApiKey::Fetch) => "Fetch",
        Ok(ApiKey::ListOffsets) => "ListOffsets",
        Ok(ApiKey::Metadata) => "Metadata",
        Ok(ApiKey::ApiVersions) => "ApiVersions",
        Ok(ApiKey::SaslHandshake) => "SaslHandshake",
        Ok(ApiKey::SaslAuthenticate) => "SaslAuthenticate",
        Ok(ApiKey::InitProducerId) => "InitProducerId",
        Ok(ApiKey::OffsetForLeaderEpoch) => "OffsetForLeaderEpoch",
        _ => "request",
    }
}

/// A client's switch that stops every write: once set, no frame leaves any of its connections
/// and each of them is closed (abortively).
#[derive(Debug, Clone, Default)]
pub(crate) struct Fence(Arc<AtomicBool>);

impl Fence {
    /// Whether writing stopped.
    pub(crate) fn is_set(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }

    /// Stops writing (for good).
    pub(crate) fn set(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// Numbers connections, so that a caller can tell whether two requests went on the same one.
fn next_serial() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

trait Stream: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Stream for T {}

type Waiter = oneshot::Sender<Result<Bytes, String>>;

/// State shared by the connection handle, its I/O tasks and outstanding requests.
struct Shared {
    broker: String,
    pending: Mutex<HashMap<i32, Waiter>>,
    closed: Mutex<Option<String>>,
    /// The handle was dropped: the reader ends once nothing is outstanding.
    released: AtomicBool,
    /// Poked on close and release so the I/O tasks re-check their state.
    poke: watch::Sender<()>,
    /// The client's fence: checked before every frame is written.
    fence: Fence,
}

impl Shared {
    /// Closes the connection for `reason`; every outstanding request fails with it.
    fn close(&self, reason: &str) {
        {
            let mut closed = self.closed.lock().unwrap_or_else(|p| p.into_inner());
            if closed.is_none() {
                *closed = Some(reason.to_string());
            }
        }
        let waiters: Vec<Waiter> = self
            .pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain()
            .map(|(_, w)| w)
            .collect();
        for w in waiters {
            let _ = w.send(Err(reason.to_string()));
        }
        self.poke.send_replace(());
    }

    fn closed_reason(&self) -> Option<String> {
        self.closed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// A connection to one broker. Cheap to share (`Arc`); requests from several tasks interleave.
pub struct Connection {
    shared: Arc<Shared>,
    serial: u64,
    tx: mpsc::UnboundedSender<Bytes>,
    next_id: AtomicI32,
    client_id: StrBytes,
    versions: HashMap<i16, (i16, i16)>,
    request_timeout: Duration,
    /// Re-authentication deadline the broker set (KIP-368); replace the connection before.
    expires_at: Option<Instant>,
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.shared.released.store(true, Ordering::SeqCst);
        self.shared.poke.send_replace(());
    }
}

/// A request on the wire, waiting for its response.
pub struct PendingResponse<T> {
    shared: Arc<Shared>,
    rx: oneshot::Receiver<Result<Bytes, String>>,
    api: &'static str,
    version: i16,
    header_version: i16,
    timeout: Duration,
    _response: std::marker::PhantomData<fn() -> T>,
}

impl<T: Decodable> PendingResponse<T> {
    /// Waits for and decodes the response. A timeout closes the connection (responses arrive
    /// in order, so nothing after a lost one can be trusted).
    pub async fn wait(self) -> Result<T, WireError> {
        let broker = self.shared.broker.clone();
        let body = match tokio::time::timeout(self.timeout, self.rx).await {
            Err(_) => {
                self.shared.close(&format!("{} timed out", self.api));
                return Err(WireError::Timeout {
                    broker,
                    api: self.api,
                    after: self.timeout,
                });
            }
            Ok(Err(_)) => {
                return Err(WireError::Disconnected {
                    broker,
                    api: self.api,
                    reason: "connection closed".into(),
                });
            }
            Ok(Ok(Err(reason))) => {
                return Err(WireError::Disconnected {
                    broker,
                    api: self.api,
                    reason,
                });
            }
            Ok(Ok(Ok(body))) => body,
        };
        let mut body = body;
        let protocol = |e: anyhow::Error| WireError::Protocol {
            broker: broker.clone(),
            api: self.api,
            reason: format!("{e:#}"),
        };
        ResponseHeader::decode(&mut body, self.header_version).map_err(protocol)?;
        T::decode(&mut body, self.version).map_err(protocol)
    }
}

impl Connection {
    /// Connects to `broker` (`host:port`), negotiates API versions and authenticates, all within
    /// the configured connect timeout. On a client's `first_contact` with its cluster, a broker
    /// that closes the connection at the first request is reported as a listener speaking
    /// another protocol (or refusing the certificate); after that, as the connection loss it
    /// then most likely is (retriable).
    pub(crate) async fn connect(
        broker: &str,
        config: &WireConfig,
        tls: Option<&Arc<rustls::ClientConfig>>,
        tokens: Option<&TokenSource>,
        fence: &Fence,
        first_contact: bool,
    ) -> Result<Connection, WireError> {
        let timeout = config.connect_timeout;
        match tokio::time::timeout(
            timeout,
            Connection::establish(broker, config, tls, tokens, fence, first_contact),
        )
        .await
        {
            Ok(result) => result,
            Err(_) => Err(WireError::Connect {
                broker: broker.to_string(),
                reason: format!(
                    "no connection within {} ms (connect, TLS, ApiVersions and SASL)",
                    timeout.as_millis()
                ),
            }),
        }
    }

    async fn establish(
        broker: &str,
        config: &WireConfig,
        tls: Option<&Arc<rustls::ClientConfig>>,
        tokens: Option<&TokenSource>,
        fence: &Fence,
        first_contact: bool,
    ) -> Result<Connection, WireError> {
        let tcp = TcpStream::connect(broker)
            .await
            .map_err(|e| WireError::Connect {
                broker: broker.to_string(),
                reason: e.to_string(),
            })?;
        let _ = tcp.set_nodelay(true);
        // Abortive close: an abandoned connection's unsent bytes are dropped by the kernel, not
        // delivered after the connection was given up (a network that comes back later).
        tcp.set_zero_linger().map_err(|e| WireError::Connect {
            broker: broker.to_string(),
            reason: format!("setting SO_LINGER: {e}"),
        })?;
        let stream: Box<dyn Stream> = match tls {
            Some(tls) => {
                let host = broker.rsplit_once(':').map_or(broker, |(h, _)| h);
                let name = crate::tls::server_name(host)?;
                let stream = tokio_rustls::TlsConnector::from(tls.clone())
                    .connect(name, tcp)
                    .await
                    .map_err(|e| WireError::Tls {
                        broker: broker.to_string(),
                        reason: e.to_string(),
                    })?;
                Box::new(stream)
            }
            None => Box::new(tcp),
        };
        let mut conn = Connection::start(broker, stream, config, fence.clone());
        conn.negotiate_versions(tls.is_some(), first_contact)
            .await?;
        if let Some(mechanism) = &config.sasl {
            conn.expires_at =
                crate::sasl::authenticate(&conn, mechanism, tokens, first_contact).await?;
        }
        Ok(conn)
    }

    fn start(
        broker: &str,
        stream: Box<dyn Stream>,
        config: &WireConfig,
        fence: Fence,
    ) -> Connection {
        let shared = Arc::new(Shared {
            broker: broker.to_string(),
            pending: Mutex::new(HashMap::new()),
            closed: Mutex::new(None),
            released: AtomicBool::new(false),
            poke: watch::channel(()).0,
            fence,
        });
        let (reader, writer) = tokio::io::split(stream);
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(write_frames(writer, rx, shared.clone()));
        tokio::spawn(read_frames(
            reader,
            shared.clone(),
            config.max_response_bytes,
        ));
        Connection {
            shared,
            serial: next_serial(),
            tx,
            next_id: AtomicI32::new(1),
            client_id: StrBytes::from_string(config.client_id.clone()),
            versions: HashMap::new(),
            request_timeout: config.request_timeout,
            expires_at: None,
        }
    }

    /// `host:port` of the broker.
    pub fn broker(&self) -> &str {
        &self.shared.broker
    }

    /// This connection's number (unique in the process).
    pub fn serial(&self) -> u64 {
        self.serial
    }

    /// Closes the connection now: outstanding requests fail with `reason`, and the socket is
    /// closed abortively once the I/O tasks see it (a write in progress is abandoned).
    pub(crate) fn abort(&self, reason: &str) {
        self.shared.close(reason);
    }

    /// The connection can take requests: open, and not about to need re-authentication.
    pub fn is_usable(&self) -> bool {
        self.shared.closed_reason().is_none()
            && self
                .expires_at
                .is_none_or(|t| Instant::now() + Duration::from_secs(5) < t)
    }

    /// Why the connection closed, if it did.
    pub fn closed_reason(&self) -> Option<String> {
        self.shared.closed_reason()
    }

    /// The requests the broker offers (its ApiVersions answer): key → (min, max) version.
    pub fn api_versions(&self) -> std::collections::BTreeMap<i16, (i16, i16)> {
        self.versions.iter().map(|(k, v)| (*k, *v)).collect()
    }

    /// The version of `R` to use: the highest both sides speak, at most `cap`.
    pub fn version<R: Request>(&self, cap: i16) -> Result<i16, WireError> {
        let ours = client_max_version(R::KEY).min(cap).min(R::VERSIONS.max);
        let (min, max) =
            self.versions
                .get(&R::KEY)
                .copied()
                .ok_or_else(|| WireError::ApiVersions {
                    broker: self.broker().to_string(),
                    reason: format!("the broker does not offer {}", api_name(R::KEY)),
                })?;
        let version = ours.min(max);
        if version < min.max(R::VERSIONS.min) {
            return Err(WireError::ApiVersions {
                broker: self.broker().to_string(),
                reason: format!(
                    "{} versions {min}..={max} of the broker and up to {ours} of this client do not overlap",
                    api_name(R::KEY)
                ),
            });
        }
        Ok(version)
    }

    /// Queues `request` at `version` and returns the handle to its response. Frames are written
    /// in the order of these calls.
    pub fn request<R: Request>(
        &self,
        request: &R,
        version: i16,
        extra_timeout: Duration,
    ) -> Result<PendingResponse<R::Response>, WireError> {
        let api = api_name(R::KEY);
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let header = RequestHeader::default()
            .with_request_api_key(R::KEY)
            .with_request_api_version(version)
            .with_correlation_id(id)
            .with_client_id(Some(self.client_id.clone()));
        let mut frame = BytesMut::with_capacity(64);
        frame.put_i32(0);
        let encoded = header
            .encode(&mut frame, R::header_version(version))
            .and_then(|_| request.encode(&mut frame, version));
        encoded.map_err(|e| WireError::Protocol {
            broker: self.broker().to_string(),
            api,
            reason: format!("cannot encode: {e:#}"),
        })?;
        let length = (frame.len() - 4) as i32;
        frame[0..4].copy_from_slice(&length.to_be_bytes());

        if self.shared.fence.is_set() {
            return Err(WireError::Fenced {
                broker: self.broker().to_string(),
                api,
            });
        }
        let (waiter, rx) = oneshot::channel();
        {
            let mut pending = self
                .shared
                .pending
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            if let Some(reason) = self.shared.closed_reason() {
                return Err(WireError::Disconnected {
                    broker: self.broker().to_string(),
                    api,
                    reason,
                });
            }
            pending.insert(id, waiter);
            // Queued under the lock: a concurrent close either sees this waiter or we saw it.
            if self.tx.send(frame.freeze()).is_err() {
                pending.remove(&id);
                return Err(WireError::Disconnected {
                    broker: self.broker().to_string(),
                    api,
                    reason: "the writer stopped".into(),
                });
            }
        }
        Ok(PendingResponse {
            shared: self.shared.clone(),
            rx,
            api,
            version,
            header_version: <R::Response as HeaderVersion>::header_version(version),
            timeout: self.request_timeout + extra_timeout,
            _response: std::marker::PhantomData,
        })
    }

    /// Sends `request` at the negotiated version (at most `cap`) and waits for the response.
    pub async fn send<R: Request>(&self, request: &R, cap: i16) -> Result<R::Response, WireError> {
        let version = self.version::<R>(cap)?;
        self.request(request, version, Duration::ZERO)?.wait().await
    }

    /// Asks the broker for its API versions (v3, or v0 when it refuses v3).
    async fn negotiate_versions(
        &mut self,
        tls: bool,
        first_contact: bool,
    ) -> Result<(), WireError> {
        let request = ApiVersionsRequest::default()
            .with_client_software_name(StrBytes::from_static_str("kmirror-wire"))
            .with_client_software_version(StrBytes::from_static_str(env!("CARGO_PKG_VERSION")));
        // Errors of queueing count like errors of waiting: the broker may have closed the
        // connection before the first request was queued (a refused client certificate).
        let mut response = match self.request(&request, 3, Duration::ZERO) {
            Ok(pending) => pending.wait().await,
            Err(e) => Err(e),
        };
        let unsupported = KafkaCode(35);
        let retry_v0 = match &response {
            Ok(r) => KafkaCode(r.error_code) == unsupported,
            // A broker that refuses v3 answers in the v0 layout, which v3 cannot decode.
            Err(WireError::Protocol { .. }) => true,
            Err(_) => false,
        };
        if retry_v0 {
            response = match self.request(&ApiVersionsRequest::default(), 0, Duration::ZERO) {
                Ok(pending) => pending.wait().await,
                Err(e) => Err(e),
            };
        }
        let response: ApiVersionsResponse = response.map_err(|e| match e {
            // TLS 1.3 servers check the client certificate after the handshake completed: the
            // first request meets an alert (or a reset, when the write loses the race).
            // A connection lost once the cluster was reached stays what it is: retriable.
            e @ WireError::Disconnected { .. } if !first_contact => e,
            WireError::Disconnected { reason, .. } if tls => WireError::Tls {
                broker: self.broker().to_string(),
                reason: format!(
                    "the broker ended the TLS session ({reason}); is a client certificate \
                     required, or not trusted by the broker?"
                ),
            },
            WireError::Disconnected { reason, .. } => WireError::ApiVersions {
                broker: self.broker().to_string(),
                reason: format!(
                    "the broker closed the connection ({reason}); wrong security.protocol \
                     for this listener?"
                ),
            },
            WireError::Protocol { reason, .. } => WireError::ApiVersions {
                broker: self.broker().to_string(),
                reason: format!("unreadable answer ({reason}); is this a Kafka listener?"),
            },
            other => other,
        })?;
        if response.error_code != 0 {
            return Err(WireError::ApiVersions {
                broker: self.broker().to_string(),
                reason: KafkaCode(response.error_code).to_string(),
            });
        }
        self.versions = response
            .api_keys
            .iter()
            .map(|k| (k.api_key, (k.min_version, k.max_version)))
            .collect();
        Ok(())
    }
}

async fn write_frames(
    mut writer: tokio::io::WriteHalf<Box<dyn Stream>>,
    mut rx: mpsc::UnboundedReceiver<Bytes>,
    shared: Arc<Shared>,
) {
    let mut poked = shared.poke.subscribe();
    loop {
        let frame = tokio::select! {
            frame = rx.recv() => frame,
            _ = poked.changed() => {
                if shared.closed_reason().is_some() {
                    return;
                }
                continue;
            }
        };
        // The handle is gone; the reader finishes what is outstanding.
        let Some(frame) = frame else { return };
        // The last gate before the wire: a fenced client writes nothing more.
        if shared.fence.is_set() {
            shared.close("the client was fenced: nothing more is written");
            return;
        }
        // A write that cannot finish (a peer that stopped reading, a network that dropped) is
        // abandoned when the connection closes; the socket's abortive close drops the rest.
        let written = async {
            writer.write_all(&frame).await?;
            if rx.is_empty() {
                writer.flush().await?;
            }
            Ok::<(), std::io::Error>(())
        };
        tokio::pin!(written);
        let result = loop {
            tokio::select! {
                result = &mut written => break result,
                _ = poked.changed() => {
                    if shared.closed_reason().is_some() {
                        return;
                    }
                }
            }
        };
        if let Err(e) = result {
            shared.close(&format!("write failed: {e}"));
            return;
        }
    }
}

/// The reader is done: closed, or released with nothing outstanding.
fn reader_done(shared: &Shared) -> bool {
    shared.closed_reason().is_some()
        || (shared.released.load(Ordering::SeqCst)
            && shared
                .pending
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .is_empty())
}

async fn read_frames(
    mut reader: tokio::io::ReadHalf<Box<dyn Stream>>,
    shared: Arc<Shared>,
    max_frame: usize,
) {
    let mut poked = shared.poke.subscribe();
    loop {
        if reader_done(&shared) {
            shared.close("connection released");
            return;
        }
        // A read in progress is never dropped (that would lose part of a frame), unless the
        // connection ends.
        let read = read_frame(&mut reader, max_frame);
        tokio::pin!(read);
        let frame = loop {
            tokio::select! {
                frame = &mut read => break frame,
                _ = poked.changed() => {
                    if reader_done(&shared) {
                        shared.close("connection released");
                        return;
                    }
                }
            }
        };
        let mut frame = match frame {
            Ok(frame) => frame,
            Err(reason) => {
                shared.close(&reason);
                return;
            }
        };
        if frame.len() < 4 {
            shared.close("response shorter than its correlation id");
            return;
        }
        let id = i32::from_be_bytes(frame[0..4].try_into().expect("4 bytes"));
        let waiter = shared
            .pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id);
        match waiter {
            Some(w) => {
                let _ = w.send(Ok(std::mem::take(&mut frame)));
            }
            None => {
                shared.close(&format!("response with unknown correlation id {id}"));
                return;
            }
        }
    }
}

/// Reads one size-prefixed frame. Not cancel-safe: only cancelled when the connection ends.
async fn read_frame(
    reader: &mut tokio::io::ReadHalf<Box<dyn Stream>>,
    max_frame: usize,
) -> Result<Bytes, String> {
    let mut size = [0u8; 4];
    reader
        .read_exact(&mut size)
        .await
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::UnexpectedEof => "the broker closed the connection".to_string(),
            _ => format!("read failed: {e}"),
        })?;
    // A TLS record header (alert or handshake, version 3.x) where a Kafka size should be.
    if matches!(size, [0x15 | 0x16, 0x03, 0x00..=0x04, _]) {
        return Err("the listener answered with TLS; use security.protocol SSL or SASL_SSL".into());
    }
    let size = i32::from_be_bytes(size);
    if size < 0 || size as usize > max_frame {
        return Err(format!(
            "response of {size} bytes exceeds receive.message.max.bytes {max_frame} \
             (or the listener does not speak this security protocol)"
        ));
    }
    let mut body = BytesMut::zeroed(size as usize);
    reader
        .read_exact(&mut body)
        .await
        .map_err(|e| format!("read failed mid-response: {e}"))?;
    Ok(body.freeze())
}
