"""Optional API keys (issue 33): with `ATTSERVE_API_KEYS` or `ATTSERVE_API_KEYS_FILE` set,
every route but the health checks answers 401 unless the request carries
`Authorization: Bearer <one of the keys>`; `/metrics` stays open unless
`ATTSERVE_METRICS_REQUIRE_KEY` (Prometheus scrapes it from inside the deployment).

The token is compared in constant time (hmac.compare_digest of SHA-256 digests, so neither
its content nor its length shows in the timing, and every key is compared), and it is never
logged or repeated: the 401 says only what is missing. It is checked before the body is read.
"""

from __future__ import annotations

import hashlib
import hmac

from starlette.types import ASGIApp, Receive, Scope, Send

from service.errors import error_response

# what a load balancer or an orchestrator probes: never behind a key
HEALTH_PATHS = frozenset({"/health/live", "/health/ready", "/v2/health/live", "/v2/health/ready"})
CHALLENGE = 'Bearer realm="attserve"'


def _digest(token: bytes) -> bytes:
    return hashlib.sha256(token).digest()


class ApiKeyMiddleware:
    def __init__(self, app: ASGIApp, keys: list[str], metrics_require_key: bool = False) -> None:
        self.app = app
        self.digests = [_digest(k.encode()) for k in keys]
        self.open_paths = HEALTH_PATHS if metrics_require_key else HEALTH_PATHS | {"/metrics"}

    def authorized(self, scope: Scope) -> bool | None:
        """True for a known key, False for another token, None for no bearer token."""
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
        return matched

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self.open_paths:
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
