"""A JWT issuer for tests: a JWKS served on loopback and tokens signed with its keys.

Real parts only: keys made with joserfc, the JWKS served by ``http.server`` in a thread.
Used by the JWT tests of tests/transport and by the browser tests of an embedded
playground (a host page hands the page its user's token).
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from joserfc import jwt
from joserfc.jwk import ECKey, OKPKey, RSAKey

__all__ = ["AUDIENCE", "ISSUER", "JwksServer", "claims", "sign"]

ISSUER = "https://id.example.test"
AUDIENCE = "parkway-tests"


class JwksServer:
    """Serves ``document`` at ``/jwks`` and counts the fetches; a context manager."""

    def __init__(self) -> None:
        self.document: dict[str, Any] = {"keys": []}
        self.fetches = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.fetches += 1
                body = json.dumps(outer.document).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/jwks"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def publish(self, *keys: RSAKey | ECKey | OKPKey) -> None:
        self.document = {"keys": [key.as_dict(private=False) for key in keys]}

    def __enter__(self) -> JwksServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def claims(**changes: Any) -> dict[str, Any]:
    """A token's claims for ``alice`` for ten minutes; ``changes`` override them (a
    ``None`` value removes the claim)."""
    now = int(time.time())
    found = {"iss": ISSUER, "aud": AUDIENCE, "sub": "alice", "iat": now, "exp": now + 600}
    found.update(changes)
    return {k: v for k, v in found.items() if v is not None}


def sign(key: RSAKey | ECKey | OKPKey, alg: str = "RS256", **changes: Any) -> str:
    """A compact JWT with :func:`claims`, signed with ``key`` (named by its kid)."""
    header = {"alg": alg, "kid": key.kid}
    return jwt.encode(header, claims(**changes), key, algorithms=[alg])
