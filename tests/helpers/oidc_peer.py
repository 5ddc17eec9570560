"""A real OAuth 2.0 / OpenID Connect provider on loopback, for tests (``tests/helpers/oidc``).

``OidcPeer`` runs ``node tests/helpers/oidc/server.mjs`` (the ``oidc-provider`` npm package,
pinned) as a subprocess: authorization code with PKCE (S256) required for every client,
the RFC 9207 ``iss`` response parameter, refresh tokens rotated on every use with reuse
detection, revocation and introspection. Being an independent implementation, it
catches mistakes that a provider written alongside our client would share with it.

``login_and_consent`` plays the user: it walks the provider's real HTML login and
consent pages with a cookie-keeping httpx client and returns the redirect back to the
client without following it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import selectors
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from html.parser import HTMLParser
from pathlib import Path
from typing import IO, Any, Literal, Self
from urllib.parse import urljoin, urlsplit

import httpx

__all__ = [
    "OIDC_DIR",
    "Decision",
    "OidcPeer",
    "OidcPeerError",
    "login_and_consent",
    "oidc_peer",
]

logger = logging.getLogger(__name__)

OIDC_DIR = Path(__file__).resolve().parent / "oidc"
SERVER = OIDC_DIR / "server.mjs"
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
HTTP_TIMEOUT_S = 10.0
MAX_STEPS = 10

Decision = Literal["allow", "deny", "cancel"]


class OidcPeerError(RuntimeError):
    """The test provider could not be started, or a flow through it went off script."""


class OidcPeer:
    """One running test provider. Build it with :meth:`start`, end it with :meth:`stop`."""

    def __init__(
        self, process: subprocess.Popen[bytes], workdir: Path, issuer: str, port: int
    ) -> None:
        self._process = process
        self._workdir = workdir
        self.issuer = issuer
        self.port = port

    @classmethod
    def start(
        cls,
        clients: Sequence[Mapping[str, Any]],
        *,
        coop: bool = False,
        access_token_ttl: int | None = None,
        grant_only: str | None = None,
        resources: Sequence[str] = (),
    ) -> OidcPeer:
        """Start a provider on a free loopback port and wait until it serves.

        ``clients`` are ``{client_id, client_secret, redirect_uris}`` mappings; each may
        authenticate with ``client_secret_basic`` or ``client_secret_post``. ``coop`` adds ``Cross-Origin-Opener-Policy: same-origin``
        to its HTML pages; ``access_token_ttl`` is in seconds (default 3600);
        ``grant_only`` (space-separated scopes) makes consent grant only those;
        ``resources``: resource servers (RFC 8707) it issues JWT access tokens for.
        """
        node = _node_executable()
        workdir = Path(tempfile.mkdtemp(prefix="oidc-peer-"))
        clients_file = workdir / "clients.json"
        clients_file.write_text(json.dumps(list(map(dict, clients))), encoding="utf-8")
        command = [
            node,
            str(SERVER),
            "--port",
            "0",
            "--clients",
            str(clients_file),
            "--exit-on-stdin-close",
        ]
        if coop:
            command += ["--coop", "same-origin"]
        if access_token_ttl is not None:
            command += ["--access-token-ttl", str(access_token_ttl)]
        if grant_only is not None:
            command += ["--grant-only", grant_only]
        for resource in resources:
            command += ["--resource", resource]

        stderr_path = workdir / "stderr.log"
        with stderr_path.open("wb") as stderr:
            process = subprocess.Popen(
                command,
                cwd=OIDC_DIR,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
            )
        try:
            ready = _read_ready_line(process, stderr_path)
        except BaseException:
            _terminate(process)
            shutil.rmtree(workdir, ignore_errors=True)
            raise
        peer = cls(process, workdir, str(ready["issuer"]), int(ready["port"]))
        logger.debug("oidc test provider up at %s", peer.issuer)
        return peer

    def stats(self) -> dict[str, Any]:
        """Request counts seen by the provider since start or :meth:`reset_stats`.

        ``token_requests`` by ``grant_type``, ``token_errors`` by OAuth error code,
        ``revocation_requests`` and ``introspection_requests``; failed requests count.
        """
        response = httpx.get(f"{self.issuer}/__test/stats", timeout=HTTP_TIMEOUT_S)
        response.raise_for_status()
        stats: dict[str, Any] = response.json()
        return stats

    def reset_stats(self) -> None:
        """Zero the counters of :meth:`stats`."""
        httpx.post(f"{self.issuer}/__test/reset", timeout=HTTP_TIMEOUT_S).raise_for_status()

    def stderr_text(self) -> str:
        """What the provider wrote to stderr so far (for failure messages)."""
        path = self._workdir / "stderr.log"
        return path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""

    def stop(self) -> None:
        """Terminate the provider (kill it if it lingers) and remove its files. Idempotent."""
        _terminate(self._process)
        shutil.rmtree(self._workdir, ignore_errors=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


@contextlib.contextmanager
def oidc_peer(
    clients: Sequence[Mapping[str, Any]],
    *,
    coop: bool = False,
    access_token_ttl: int | None = None,
    grant_only: str | None = None,
    resources: Sequence[str] = (),
) -> Iterator[OidcPeer]:
    """:meth:`OidcPeer.start` as a context manager: the provider stops on exit."""
    peer = OidcPeer.start(
        clients,
        coop=coop,
        access_token_ttl=access_token_ttl,
        grant_only=grant_only,
        resources=resources,
    )
    try:
        yield peer
    finally:
        peer.stop()


def _node_executable() -> str:
    node = shutil.which("node")
    if node is None:
        raise OidcPeerError("the `node` executable is not on PATH; install Node.js 20 or later")
    if not (OIDC_DIR / "node_modules" / "oidc-provider").is_dir():
        raise OidcPeerError(
            "tests/helpers/oidc/node_modules is missing oidc-provider: "
            "run `npm ci` in tests/helpers/oidc (`make node-deps` does it)"
        )
    return node


def _read_ready_line(process: subprocess.Popen[bytes], stderr_path: Path) -> dict[str, Any]:
    """The provider's one JSON line on stdout, within ``START_TIMEOUT_S``."""
    stdout: IO[bytes] | None = process.stdout
    assert stdout is not None
    line = b""
    deadline = time.monotonic() + START_TIMEOUT_S
    with selectors.DefaultSelector() as selector:
        selector.register(stdout, selectors.EVENT_READ)
        while not line.endswith(b"\n"):
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not selector.select(remaining):
                raise OidcPeerError(
                    f"the oidc test provider did not report ready within {START_TIMEOUT_S:.0f} s; "
                    f"stderr:\n{_tail(stderr_path)}"
                )
            chunk = os.read(stdout.fileno(), 4096)
            if not chunk:
                code = process.wait(timeout=STOP_TIMEOUT_S)
                raise OidcPeerError(
                    f"the oidc test provider exited with status {code} before it was ready; "
                    f"stderr:\n{_tail(stderr_path)}"
                )
            line += chunk
    try:
        ready: dict[str, Any] = json.loads(line)
    except json.JSONDecodeError as exc:
        raise OidcPeerError(f"the oidc test provider printed {line!r}, not JSON") from exc
    return ready


def _tail(path: Path, limit: int = 4000) -> str:
    return path.read_text(encoding="utf-8", errors="replace")[-limit:]


def _terminate(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=STOP_TIMEOUT_S)
    for stream in (process.stdin, process.stdout):
        if stream is not None:
            stream.close()


# -- playing the user ------------------------------------------------------------------


class _Form:
    def __init__(self, attrs: Mapping[str, str | None]) -> None:
        self.id = attrs.get("id") or ""
        self.action = attrs.get("action") or ""
        self.method = (attrs.get("method") or "get").lower()
        self.fields: dict[str, str] = {}
        self.buttons: list[str] = []


class _FormParser(HTMLParser):
    """The forms of a page: id, action, method, named input values and button ids."""

    def __init__(self) -> None:
        super().__init__()
        self.forms: dict[str, _Form] = {}
        self._current: _Form | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        named = dict(attrs)
        if tag == "form":
            self._current = _Form(named)
            self.forms[self._current.id] = self._current
        elif self._current is not None and tag == "input" and named.get("name"):
            self._current.fields[str(named["name"])] = named.get("value") or ""
        elif self._current is not None and tag == "button" and named.get("id"):
            self._current.buttons.append(str(named["id"]))

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self._current = None


def _forms(html: str) -> dict[str, _Form]:
    parser = _FormParser()
    parser.feed(html)
    parser.close()
    return parser.forms


def _same_endpoint(location: str, redirect_uri: str) -> bool:
    got, want = urlsplit(location), urlsplit(redirect_uri)
    return (got.scheme, got.netloc, got.path) == (want.scheme, want.netloc, want.path)


def login_and_consent(
    client: httpx.Client,
    authorize_url: str,
    *,
    login: str = "alice",
    decision: Decision = "allow",
) -> str:
    """Walk the provider's pages from ``authorize_url``; return the redirect to the client.

    The login form gets ``login`` and a password; on the consent page ``decision``
    presses Allow or Deny. ``"cancel"`` presses Cancel on the login page instead
    (pages already passed, because the client's cookies hold a session or a grant,
    are skipped as a browser would). The returned ``Location`` (code or error, ``state``,
    ``iss``) is not followed. ``client`` must keep cookies and must not follow redirects
    itself. Raises :class:`OidcPeerError` when the provider shows an error page instead.
    """
    redirect_uri = dict(httpx.URL(authorize_url).params).get("redirect_uri")
    if not redirect_uri:
        raise OidcPeerError(f"authorize_url has no redirect_uri: {authorize_url}")
    response = client.get(authorize_url, follow_redirects=False)
    for _ in range(MAX_STEPS):
        if response.is_redirect:
            location = urljoin(str(response.url), response.headers["location"])
            if _same_endpoint(location, redirect_uri):
                return location
            response = client.get(location, follow_redirects=False)
            continue
        if response.status_code != 200 or "html" not in response.headers.get("content-type", ""):
            raise OidcPeerError(
                f"the provider answered {response.status_code} at {response.url}: {response.text[:500]}"
            )
        response = _answer_page(client, response, login=login, decision=decision)
    raise OidcPeerError(f"no redirect back to {redirect_uri} after {MAX_STEPS} steps")


def _answer_page(
    client: httpx.Client, response: httpx.Response, *, login: str, decision: Decision
) -> httpx.Response:
    forms = _forms(response.text)
    if "login" in forms:
        if decision == "cancel":
            form, data = forms["cancel"], dict(forms["cancel"].fields)
        else:
            form = forms["login"]
            data = {**form.fields, "login": login, "password": "correct horse"}
    elif "consent" in forms:
        form = forms["abort"] if decision in ("deny", "cancel") else forms["consent"]
        data = dict(form.fields)
    else:
        raise OidcPeerError(
            f"unexpected page at {response.url} (status {response.status_code}): "
            f"{response.text[:500]}"
        )
    target = urljoin(str(response.url), form.action)
    return client.post(target, data=data, follow_redirects=False)
