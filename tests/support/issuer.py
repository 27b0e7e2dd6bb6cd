"""A JWT issuer on loopback, shaped like kube-apiserver's: OIDC discovery at ``/.well-known/openid-configuration``,
the JWK Set at ``/openid/v1/jwks``, and projected service-account tokens with the claims a pod gets.

Its signing keys can be rotated and it can be taken down (every request answered 503) while it runs; it counts the
JWKS requests it served.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

JWKS_PATH = "/openid/v1/jwks"
AUDIENCE = "schedlock"


@dataclass
class SigningKey:
    kid: str
    algorithm: str
    private: Any

    @classmethod
    def new(cls, algorithm: str = "RS256") -> SigningKey:
        private: Any
        if algorithm == "RS256":
            private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        elif algorithm == "ES256":
            private = ec.generate_private_key(ec.SECP256R1())
        else:
            private = ed25519.Ed25519PrivateKey.generate()
        return cls(uuid.uuid4().hex[:16], algorithm, private)

    def jwk(self) -> dict[str, Any]:
        algorithm = jwt.get_algorithm_by_name(self.algorithm)
        public = json.loads(algorithm.to_jwk(self.private.public_key()))
        return {**public, "kid": self.kid, "use": "sig", "alg": self.algorithm}


@dataclass
class Issuer:
    """The issuer's state; ``url`` is its ``iss``."""

    url: str = ""
    keys: list[SigningKey] = field(default_factory=lambda: [SigningKey.new()])
    down: bool = False
    jwks_requests: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def rotate(self, algorithm: str = "RS256", keep_old: bool = False) -> SigningKey:
        """A new signing key, first in the set; the old ones stay only with ``keep_old``."""
        key = SigningKey.new(algorithm)
        with self.lock:
            self.keys = [key, *self.keys] if keep_old else [key]
        return key

    def claims(
        self, namespace: str = "billing", account: str = "cron", lifetime: float = 3600, **extra: Any
    ) -> dict[str, Any]:
        """What kube-apiserver puts in a projected service-account token for a pod."""
        now = int(time.time())
        return {
            "aud": [AUDIENCE],
            "exp": now + int(lifetime),
            "iat": now,
            "nbf": now,
            "iss": self.url,
            "jti": str(uuid.uuid4()),
            "kubernetes.io": {
                "namespace": namespace,
                "node": {"name": "node-1", "uid": str(uuid.uuid4())},
                "pod": {"name": f"{account}-7d9f8", "uid": str(uuid.uuid4())},
                "serviceaccount": {"name": account, "uid": str(uuid.uuid4())},
            },
            "sub": f"system:serviceaccount:{namespace}:{account}",
            **extra,
        }

    def token(self, claims: dict[str, Any] | None = None, key: SigningKey | None = None, **header: Any) -> str:
        key = key or self.keys[0]
        return jwt.encode(
            claims or self.claims(), key.private, algorithm=key.algorithm, headers={"kid": key.kid, **header}
        )


@contextmanager
def serving(issuer: Issuer | None = None) -> Iterator[Issuer]:
    """``issuer`` (a new one by default) served on a free loopback port while entered."""
    state = issuer or Issuer()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if state.down:
                self._send(503, {"error": "down"})
            elif self.path == "/.well-known/openid-configuration":
                self._send(
                    200,
                    {
                        "issuer": state.url,
                        "jwks_uri": state.url + JWKS_PATH,
                        "response_types_supported": ["id_token"],
                        "subject_types_supported": ["public"],
                        "id_token_signing_alg_values_supported": ["RS256"],
                    },
                )
            elif self.path == JWKS_PATH:
                with state.lock:
                    state.jwks_requests += 1
                    keys = [k.jwk() for k in state.keys]
                self._send(200, {"keys": keys})
            else:
                self._send(404, {})

        def _send(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()


def issuer_config(
    issuer: Issuer, bindings: list[dict[str, Any]], tokens: list[dict[str, Any]] | None = None, **options: Any
) -> str:
    """A configuration (JSON) trusting ``issuer`` as ``cluster`` by discovery, with these bindings and tokens."""
    entry = {"name": "cluster", "issuer": issuer.url, "audiences": [AUDIENCE], **options}
    return json.dumps({"tokens": tokens or [], "issuers": [entry], "bindings": bindings})
