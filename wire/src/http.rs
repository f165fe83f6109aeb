//! A minimal HTTP/1.1 client over tokio for one job: POST a form to an OAuth token endpoint
//! (`http://` or `https://`) and read the response (Content-Length, chunked or until close).

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

/// Largest response body accepted.
const MAX_RESPONSE: usize = 1024 * 1024;

/// A parsed `http(s)://host[:port]/path` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Url {
    /// TLS.
    pub https: bool,
    /// Host (without IPv6 brackets).
    pub host: String,
    /// Port.
    pub port: u16,
    /// Path and query, starting with `/`.
    pub path: String,
}

impl Url {
    /// Parses an absolute http or https URL.
    pub fn parse(url: &str) -> Result<Url, String> {
        let (https, rest) = if let Some(rest) = url.strip_prefix("https://") {
            (true, rest)
        } else if let Some(rest) = url.strip_prefix("http://") {
            (false, rest)
        } else {
            return Err("the URL must start with http:// or https://".into());
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        if authority.contains('@') {
            return Err("credentials in the URL are not supported".into());
        }
        let default_port = if https { 443 } else { 80 };
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (host, after) = v6.split_once(']').ok_or("unterminated IPv6 address")?;
            let port = match after.strip_prefix(':') {
                Some(p) => p.parse().map_err(|_| "bad port")?,
                None => default_port,
            };
            (host.to_string(), port)
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h.to_string(), p.parse().map_err(|_| "bad port")?),
                None => (authority.to_string(), default_port),
            }
        };
        if host.is_empty() {
            return Err("the URL has no host".into());
        }
        Ok(Url {
            https,
            host,
            port,
            path: path.to_string(),
        })
    }

    fn host_header(&self) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        let default = if self.https { 443 } else { 80 };
        if self.port == default {
            host
        } else {
            format!("{host}:{}", self.port)
        }
    }
}

/// `application/x-www-form-urlencoded` encoding of one value.
pub fn form_encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'*' => {
                out.push(b as char)
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// An HTTP response: status and body.
#[derive(Debug)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// Body bytes.
    pub body: Vec<u8>,
}

/// POSTs `body` (a form) to `url`, with extra headers, within `timeout`. Errors are short and
/// never include the request.
pub async fn post_form(
    url: &Url,
    body: &str,
    headers: &[(&str, String)],
    tls: Option<Arc<rustls::ClientConfig>>,
    timeout: Duration,
) -> Result<Response, String> {
    tokio::time::timeout(timeout, async {
        let tcp = TcpStream::connect((url.host.as_str(), url.port))
            .await
            .map_err(|e| format!("cannot connect: {e}"))?;
        let _ = tcp.set_nodelay(true);
        if url.https {
            let config = tls.ok_or("https needs a TLS configuration")?;
            let name = crate::tls::server_name(&url.host).map_err(|e| e.to_string())?;
            let stream = tokio_rustls::TlsConnector::from(config)
                .connect(name, tcp)
                .await
                .map_err(|e| format!("TLS: {e}"))?;
            exchange(stream, url, body, headers).await
        } else {
            exchange(tcp, url, body, headers).await
        }
    })
    .await
    .map_err(|_| format!("no response within {} ms", timeout.as_millis()))?
}

async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    url: &Url,
    body: &str,
    headers: &[(&str, String)],
) -> Result<Response, String> {
    let mut request = format!(
        "POST {} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/x-www-form-urlencoded\r\n\
         Accept: application/json\r\nContent-Length: {}\r\nConnection: close\r\n",
        url.path,
        url.host_header(),
        body.len()
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| format!("cannot send: {e}"))?;
    stream
        .flush()
        .await
        .map_err(|e| format!("cannot send: {e}"))?;
    let mut raw = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        let n = match stream.read(&mut chunk).await {
            Ok(n) => n,
            // Servers that close without a TLS close_notify: keep what arrived.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => 0,
            Err(e) => return Err(format!("cannot read the response: {e}")),
        };
        if n == 0 {
            break;
        }
        raw.extend_from_slice(&chunk[..n]);
        if raw.len() > MAX_RESPONSE {
            return Err("the response is larger than 1 MiB".into());
        }
        if let Some(response) = parse_response(&raw, false)? {
            return Ok(response);
        }
    }
    parse_response(&raw, true)?.ok_or_else(|| "the response ended early".to_string())
}

/// Parses a complete response from `raw`; `None` while more bytes are needed. With `eof`, a body
/// without length runs to the end.
pub fn parse_response(raw: &[u8], eof: bool) -> Result<Option<Response>, String> {
    let Some(head_end) = raw.windows(4).position(|w| w == b"\r\n\r\n") else {
        return if eof {
            Err("the response has no complete header".into())
        } else {
            Ok(None)
        };
    };
    let head = std::str::from_utf8(&raw[..head_end]).map_err(|_| "the header is not text")?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status: u16 = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| "the response has no status line".to_string())?;
    let mut length = None;
    let mut chunked = false;
    for line in lines {
        if let Some((name, value)) = line.split_once(':') {
            let value = value.trim();
            if name.eq_ignore_ascii_case("content-length") {
                length = Some(value.parse::<usize>().map_err(|_| "bad Content-Length")?);
            } else if name.eq_ignore_ascii_case("transfer-encoding")
                && value.to_ascii_lowercase().contains("chunked")
            {
                chunked = true;
            }
        }
    }
    let body = &raw[head_end + 4..];
    if chunked {
        return Ok(dechunk(body)?.map(|body| Response { status, body }));
    }
    match length {
        Some(n) if body.len() >= n => Ok(Some(Response {
            status,
            body: body[..n].to_vec(),
        })),
        Some(_) if eof => Err("the response body ended early".into()),
        Some(_) => Ok(None),
        None if eof => Ok(Some(Response {
            status,
            body: body.to_vec(),
        })),
        None => Ok(None),
    }
}

fn dechunk(mut body: &[u8]) -> Result<Option<Vec<u8>>, String> {
    let mut out = Vec::new();
    loop {
        let Some(line_end) = body.windows(2).position(|w| w == b"\r\n") else {
            return Ok(None);
        };
        let size_text = std::str::from_utf8(&body[..line_end]).map_err(|_| "bad chunk size")?;
        let size_text = size_text.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_text, 16).map_err(|_| "bad chunk size")?;
        let data_start = line_end + 2;
        if size == 0 {
            return Ok(Some(out));
        }
        if body.len() < data_start + size + 2 {
            return Ok(None);
        }
        out.extend_from_slice(&body[data_start..data_start + size]);
        body = &body[data_start + size + 2..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse() {
        let u = Url::parse("http://127.0.0.1:29096/token").unwrap();
        assert_eq!(
            (u.https, u.host.as_str(), u.port, u.path.as_str()),
            (false, "127.0.0.1", 29096, "/token")
        );
        let u = Url::parse("https://idp.example/realms/x/token?a=b").unwrap();
        assert_eq!((u.port, u.path.as_str()), (443, "/realms/x/token?a=b"));
        assert_eq!(u.host_header(), "idp.example");
        let u = Url::parse("http://[::1]:8080").unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.path.as_str()),
            ("::1", 8080, "/")
        );
        assert_eq!(u.host_header(), "[::1]:8080");
        assert!(Url::parse("ftp://x").is_err());
        assert!(Url::parse("http://user:pw@x/").is_err());
    }

    #[test]
    fn forms_encode() {
        assert_eq!(form_encode("a b&c=d/é"), "a+b%26c%3Dd%2F%C3%A9");
    }

    #[test]
    fn responses_parse() {
        let raw = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}";
        let r = parse_response(raw, false).unwrap().unwrap();
        assert_eq!((r.status, r.body.as_slice()), (200, &b"{}"[..]));
        assert!(
            parse_response(&raw[..raw.len() - 1], false)
                .unwrap()
                .is_none()
        );
        let chunked = b"HTTP/1.1 401 Unauthorized\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n";
        let r = parse_response(chunked, false).unwrap().unwrap();
        assert_eq!((r.status, r.body.as_slice()), (401, &b"abcde"[..]));
        let until_close = b"HTTP/1.0 200 OK\r\n\r\nxyz";
        assert!(parse_response(until_close, false).unwrap().is_none());
        assert_eq!(
            parse_response(until_close, true).unwrap().unwrap().body,
            b"xyz"
        );
    }
}
