"""A JWT issuer for tests: a JWKS served on loopback and tokens signed with its keys.

Real parts only: keys made with joserfc, the JWKS served by ``http.server`` in a thread.
Used by the JWT tests of tests/transport and by the browser tests of an embedded
playground (a host page hands the page its user's token).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

from joserfc import jwt
from joserfc.jwk import ECKey, OKPKey, RSAKey

__all__ = ["AUDIENCE", "FLOOD_BYTES", "ISSUER", "JwksServer", "Mode", "claims", "sign"]

ISSUER = "https://id.example.test"
AUDIENCE = "parkway-tests"


# How an answer is sent: whole; one byte per TRICKLE_S until released (then the rest);
# FLOOD_BYTES of body with no length declared; the same with its length declared.
Mode = Literal["serve", "trickle", "flood", "flood-declared"]
TRICKLE_S = 0.05
FLOOD_BYTES = 64 * 1024 * 1024  # more than loopback socket buffers can swallow


class JwksServer:
    """Serves ``document`` at ``/jwks`` and counts the fetches; a context manager.

    ``mode`` makes it a slow or hostile issuer (see :data:`Mode`); the events let a test
    pace itself by what the server saw: ``requested`` (an answer's headers went out),
    ``release`` (set by the test: a trickle sends the rest at once), ``hung_up`` (the
    client closed before the whole body was written) and ``answered`` (the handler is
    done, either way). ``sent`` counts the body bytes written for the last answer."""

    def __init__(self) -> None:
        self.document: dict[str, Any] = {"keys": []}
        self.fetches = 0
        self.mode: Mode = "serve"
        self.requested = threading.Event()
        self.release = threading.Event()
        self.hung_up = threading.Event()
        self.answered = threading.Event()
        self.sent = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.fetches += 1
                outer.sent = 0
                body = json.dumps(outer.document).encode()
                size = FLOOD_BYTES if outer.mode.startswith("flood") else len(body)
                self.send_response(200)
                self.send_header("content-type", "application/json")
                if outer.mode != "flood":  # HTTP/1.0: without a length, the close ends it
                    self.send_header("content-length", str(size))
                self.end_headers()
                self.wfile.flush()
                outer.requested.set()
                try:
                    for part in self._parts(body):
                        self.wfile.write(part)
                        outer.sent += len(part)
                except OSError:  # the client closed the connection
                    outer.hung_up.set()
                finally:
                    outer.answered.set()

            def _parts(self, body: bytes) -> Iterator[bytes]:
                if outer.mode == "serve":
                    yield body
                elif outer.mode == "trickle":
                    for at in range(len(body)):
                        if outer.release.wait(TRICKLE_S):
                            yield body[at:]
                            return
                        yield body[at : at + 1]
                else:
                    filler = b" " * 65536
                    for _ in range(FLOOD_BYTES // len(filler)):
                        yield filler

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/jwks"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def switch(self, mode: Mode) -> None:
        """Answer the next fetches in ``mode``, the events cleared."""
        for event in (self.requested, self.release, self.hung_up, self.answered):
            event.clear()
        self.mode = mode

    def publish(self, *keys: RSAKey | ECKey | OKPKey) -> None:
        self.document = {"keys": [key.as_dict(private=False) for key in keys]}

    def __enter__(self) -> JwksServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()  # a trickle still under way ends
        self.httpd.shutdown()
        self.httpd.server_close()


def claims(**changes: Any) -> dict[str, Any]:
    """A token's claims for ``alice`` for ten minutes; ``changes`` override them (a
    ``None`` value removes the claim)."""
    now = int(time.time())
    found = {"iss": ISSUER, "aud": AUDIENCE, "sub": "alice", "iat": now, "exp": now + 600}
    found.update(changes)
    return {k: v for k, v in found.items() if v is not None}


def sign(
    key: RSAKey | ECKey | OKPKey,
    alg: str = "RS256",
    *,
    typ: str | None = "JWT",
    **changes: Any,
) -> str:
    """A compact JWT with :func:`claims`, signed with ``key`` (named by its kid), its
    header's ``typ`` being ``typ`` (None: no typ)."""
    header = {"alg": alg, "kid": key.kid}
    if typ is not None:
        header["typ"] = typ
    return jwt.encode(header, claims(**changes), key, algorithms=[alg], default_type=None)
