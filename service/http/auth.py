"""Who may call, both optional and both checked before the body is read:

- API keys: with `ATTSERVE_API_KEYS` or `ATTSERVE_API_KEYS_FILE` set, every route but the
  health checks answers 401 unless the request carries `Authorization: Bearer <one of the
  keys>`. The token is compared in constant time (hmac.compare_digest of SHA-256 digests, so
  neither its content nor its length shows in the timing, and every key is compared), and it
  is never logged or repeated: the 401 says only what is missing.
- A Host allow-list: with `ATTSERVE_ALLOWED_HOSTS` set, a request whose Host header names
  another host is 400 `invalid_host` (a web page that rebinds its own DNS name to this
  server's address sends its own name).

Both leave the health checks open (what load balancers and orchestrators probe, by address),
and `/metrics` unless `ATTSERVE_METRICS_REQUIRE_KEY` (Prometheus scrapes it by address from
inside the deployment).
"""

from __future__ import annotations

import hashlib
import hmac
import re

from starlette.types import ASGIApp, Receive, Scope, Send

from service.http.errors import error_response
from service.inference.errors import excerpt
from service.settings import Settings

# what a load balancer or an orchestrator probes: never behind a key
HEALTH_PATHS = frozenset({"/health/live", "/health/ready", "/v2/health/live", "/v2/health/ready"})
CHALLENGE = 'Bearer realm="attserve"'


def open_paths(settings: Settings) -> frozenset[str]:
    """The paths neither check applies to."""
    return HEALTH_PATHS if settings.metrics_require_key else HEALTH_PATHS | {"/metrics"}


def _digest(token: bytes) -> bytes:
    return hashlib.sha256(token).digest()


# the model repository API (service.http.repository_api): with control keys set, checked there
# against them instead
REPOSITORY_API = "/v2/repository/"
# scope["state"] key of an authorized request's tenant: the SHA-256 digest of its key (never
# the key), which the response cache (service.http.cache) keys answers on, so one key's
# callers are never told what another's sent
TENANT = "attserve_tenant"


class ApiKeyMiddleware:
    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        self.app = app
        self.digests = [_digest(k.get_secret_value().encode()) for k in settings.api_keys]
        self.open_paths = open_paths(settings)
        self.own_keys_prefix = REPOSITORY_API if settings.control_api_keys else None

    def authorized(self, scope: Scope) -> bool | None:
        """True for a known key, False for another token, None for no bearer token. A known
        key's digest is the request's tenant (scope["state"][TENANT])."""
        header = next((v for k, v in scope.get("headers", []) if k == b"authorization"), None)
        if header is None:
            return None
        scheme, _, token = header.partition(b" ")
        token = token.strip()
        if scheme.lower() != b"bearer" or not token:
            return None
        digest = _digest(token)
        matched = False
        for known in self.digests:  # no early exit: the time does not say which key matched
            matched |= hmac.compare_digest(digest, known)
        if matched:
            scope.setdefault("state", {})[TENANT] = digest
        return matched

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self.open_paths or (
                self.own_keys_prefix is not None and scope["path"].startswith(self.own_keys_prefix)):
            await self.app(scope, receive, send)
            return
        verdict = self.authorized(scope)
        if verdict:
            await self.app(scope, receive, send)
            return
        if verdict is None:
            message, challenge = "an API key is required: send the header 'Authorization: Bearer <key>'", CHALLENGE
        else:
            message, challenge = "the API key is not valid", f'{CHALLENGE}, error="invalid_token"'
        # closed: a body the client may still be sending is never read
        response = error_response(401, "unauthorized", message, {"WWW-Authenticate": challenge, "Connection": "close"},
                                  path=scope["path"])
        await response(scope, receive, send)


# Host = uri-host [":" port] (RFC 9110 7.2): a DNS name, an IPv4 address or a bracketed IPv6
# literal, and a port of digits only
_HOST = re.compile(r"(\[[0-9a-f:.]+\]|[a-z0-9_.-]+)(?::([0-9]{0,5}))?")


def host_name(header: bytes) -> str | None:
    """The host of a Host header, lowercased, without its port ("[::1]:8000" -> "[::1]"); None
    for a header that is not a host and an optional numeric port as a whole ("localhost:evil",
    "localhost:1@evil.com", "a b")."""
    match = _HOST.fullmatch(header.decode("latin-1").strip().lower())
    if match is None or (match[2] and int(match[2]) > 65535):
        return None
    return match[1]


class HostAllowListMiddleware:
    """400 `invalid_host` for a Host header outside `ATTSERVE_ALLOWED_HOSTS` (exact names, or
    `*.example.com` for its subdomains; no Host header, or one that is not a host and a numeric
    port, counts as outside). For a request line in absolute form (`POST http://host/path`) the
    server's protocol (service.http.http) puts the request line's authority in the Host header, as
    RFC 9112 3.2.2 has the authority win."""

    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        self.app = app
        hosts = [h.strip().lower() for h in settings.allowed_hosts or []]
        self.exact = frozenset(h for h in hosts if not h.startswith("*."))
        self.suffixes = tuple(h[1:] for h in hosts if h.startswith("*."))
        self.open_paths = open_paths(settings)

    def allowed(self, scope: Scope) -> bool:
        header = next((v for k, v in scope.get("headers", []) if k == b"host"), None)
        host = None if header is None else host_name(header)
        return host is not None and (host in self.exact or host.endswith(self.suffixes))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self.open_paths or self.allowed(scope):
            await self.app(scope, receive, send)
            return
        header = next((v for k, v in scope.get("headers", []) if k == b"host"), b"")
        message = (f"host {excerpt(header.decode('latin-1'))} is not served here: a host of ATTSERVE_ALLOWED_HOSTS "
                   "must be named in the Host header, with a numeric port or none")
        response = error_response(400, "invalid_host", message, {"Connection": "close"}, path=scope["path"])
        await response(scope, receive, send)
