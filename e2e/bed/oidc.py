#!/usr/bin/env python3
"""A minimal OAuth 2 identity provider for the test bed (loopback only, throwaway keys).

  oidc.py jwks KEY.pem                 print the JSON Web Key Set of an RSA key (for the broker)
  oidc.py serve PORT KEY.pem CLIENTS   serve the client-credentials grant on
                                       http://127.0.0.1:PORT/token

CLIENTS holds one `client_id:client_secret:principal` per line. A token is an RS256 JWT whose
`sub` is the client's principal, valid for an hour, with the issuer and audience the destination
broker expects. Signing uses the `openssl` command, so nothing beyond Python's standard library
is needed.
"""

import base64
import json
import subprocess
import sys
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ISSUER = "http://127.0.0.1/kmirror-testbed"
AUDIENCE = "kmirror-testbed"
KEY_ID = "kmirror-testbed"
LIFETIME_SECONDS = 3600


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def jwks(key_path: str) -> dict:
    modulus = subprocess.run(
        ["openssl", "rsa", "-in", key_path, "-noout", "-modulus"],
        check=True, capture_output=True, text=True,
    ).stdout.strip().split("=", 1)[1]
    n = bytes.fromhex(modulus)
    e = (65537).to_bytes(3, "big")
    return {"keys": [{"kty": "RSA", "use": "sig", "alg": "RS256", "kid": KEY_ID,
                      "n": b64url(n), "e": b64url(e)}]}


def sign(key_path: str, claims: dict) -> str:
    header = {"alg": "RS256", "typ": "JWT", "kid": KEY_ID}
    signing_input = f"{b64url(json.dumps(header).encode())}.{b64url(json.dumps(claims).encode())}"
    signature = subprocess.run(
        ["openssl", "dgst", "-sha256", "-sign", key_path],
        input=signing_input.encode(), check=True, capture_output=True,
    ).stdout
    return f"{signing_input}.{b64url(signature)}"


def load_clients(path: str) -> dict:
    clients = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                client_id, secret, principal = line.split(":", 2)
                clients[client_id] = (secret, principal)
    return clients


def handler(key_path: str, clients: dict):
    class TokenHandler(BaseHTTPRequestHandler):
        def reply(self, status: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 (http.server naming)
            if self.path == "/healthz":
                self.reply(200, {"status": "ok"})
            else:
                self.reply(404, {"error": "not_found"})

        def do_POST(self) -> None:  # noqa: N802
            if self.path.split("?")[0] != "/token":
                self.reply(404, {"error": "not_found"})
                return
            length = int(self.headers.get("Content-Length") or 0)
            form = urllib.parse.parse_qs(self.rfile.read(length).decode())
            client_id = (form.get("client_id") or [None])[0]
            secret = (form.get("client_secret") or [None])[0]
            auth = self.headers.get("Authorization", "")
            if auth.startswith("Basic "):
                decoded = base64.b64decode(auth[6:]).decode()
                client_id, _, secret = decoded.partition(":")
                client_id = urllib.parse.unquote_plus(client_id)
                secret = urllib.parse.unquote_plus(secret)
            if (form.get("grant_type") or [None])[0] != "client_credentials":
                self.reply(400, {"error": "unsupported_grant_type"})
                return
            known = clients.get(client_id)
            if known is None or known[0] != secret:
                self.reply(401, {"error": "invalid_client"})
                return
            now = int(time.time())
            claims = {"iss": ISSUER, "aud": AUDIENCE, "sub": known[1], "iat": now,
                      "exp": now + LIFETIME_SECONDS}
            scope = (form.get("scope") or [""])[0]
            if scope:
                # Kafka's validator refuses an empty scope claim; omit it instead.
                claims["scope"] = scope
            self.reply(200, {"access_token": sign(key_path, claims), "token_type": "Bearer",
                             "expires_in": LIFETIME_SECONDS})

        def log_message(self, fmt: str, *args) -> None:
            sys.stderr.write("oidc: " + (fmt % args) + "\n")

    return TokenHandler


def main(argv: list) -> int:
    if len(argv) == 3 and argv[1] == "jwks":
        print(json.dumps(jwks(argv[2])))
        return 0
    if len(argv) == 5 and argv[1] == "serve":
        server = ThreadingHTTPServer(("127.0.0.1", int(argv[2])),
                                     handler(argv[3], load_clients(argv[4])))
        server.serve_forever()
        return 0
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
