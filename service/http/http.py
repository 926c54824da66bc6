"""HTTP connection limits uvicorn lacks: a header-read timeout, a header size limit (with
httptools; h11 has one, httptools none), a write timeout and a connection cap that makes room
instead of refusing everyone.

uvicorn 0.54 offers `timeout_keep_alive` (idle between requests, used as is) and
`limit_concurrency` (a text/plain 503 once N connections are open: with 20,000 idle
connections every real client would get it). It has no timeout for a client that opens a
connection and sends nothing or trickles its headers (slowloris), and httptools buffers any
header size. So this is a subclass of uvicorn's own httptools protocol, written by hand
(no maintained library adds these to uvicorn), that:

- closes a connection whose request line + headers do not arrive within `header_timeout_s`
  (from the connection's opening for its first request, from the request's first byte
  after that; between requests uvicorn's keep-alive timeout applies), with a JSON 408;
- answers 431 (JSON) and closes once the headers pass `max_header_bytes`;
- drops a connection whose client does not read its answer: no byte of it acknowledged for
  `write_timeout_s` (TCP_USER_TIMEOUT, Linux: the kernel aborts the connection, which frees
  the answer in the kernel's send queue and in the transport's buffer). The keep-alive timeout
  alone would wait for an unread answer to flush for as long as the client stays connected;
  a client that reads slowly keeps its connection as long as it acknowledges something within
  each period (nginx's `send_timeout` works the same way);
- at `max_connections` open connections closes the oldest one that waits for a request,
  and answers 503 (JSON) only when every connection has a request in progress;
- stamps `scope["state"]["attserve_arrival"]` with the loop time of the request's first byte,
  where the request deadline starts (the body read counts against it);
- for a request line in absolute form (`POST http://host/path`), puts its authority in the Host
  header (RFC 9112 3.2.2: the request line's authority wins over Host), so the Host allow-list
  and anything else that reads Host see the host the request names; an authority with user
  information is 400; so is a request with more than one Host header (RFC 9112 3.2: which one
  counts would be a guess, and the allow-list could read another than the app);
- ignores an upgrade it does not make (`Upgrade: h2c`, which `curl --http2` sends on its first
  request): the request is answered in HTTP/1.1 with its body, which httptools would otherwise
  drop as the new protocol's bytes (the body is read here, by its Content-Length; a chunked
  body with an upgrade is 400); a client-sent header is logged at DEBUG, not WARNING;
- answers a request that arrived whole before a bad pipelined follower (a broken request line,
  headers over the limit, a body longer than its Content-Length) before the follower's error:
  the error is written once the answers in progress are, then the connection closes.

The body-read timeout lives in the app (service.http.entry.BodyReader): there the answer is
an ordinary JSON response the metrics count.
"""

from __future__ import annotations

import json
import logging
import resource
import socket
from typing import Any

import httptools
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from service.inference.errors import set_by
from service.settings import Settings

log = logging.getLogger("service.http.http")

# file descriptors kept for model files, the listening socket, logs, threads' pipes
FD_RESERVE = 128
# Linux only; elsewhere an unread answer stays until the client goes
TCP_USER_TIMEOUT = getattr(socket, "TCP_USER_TIMEOUT", None)


class _Rejected(Exception):
    """Raised from a parser callback to stop parsing a connection already answered."""


def effective_max_connections(settings: Settings) -> int:
    try:
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError):  # pragma: no cover
        return settings.max_connections
    if soft == resource.RLIM_INFINITY:
        return settings.max_connections
    return max(1, min(settings.max_connections, soft - FD_RESERVE))


def _json_response(status: int, reason: str, code: str, message: str) -> bytes:
    body = json.dumps({"error": {"code": code, "message": message}}).encode()
    return (f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n").encode() + body


class ConnectionGuard:
    """One server's limits, and its state shared by all its connections: the connections
    waiting for a request (oldest first: the ones a new connection may push out when the cap is
    reached) and the counters of what the guard did."""

    def __init__(self, settings: Settings) -> None:
        self.max_connections = effective_max_connections(settings)
        self.header_timeout_s = settings.header_timeout_s
        self.max_header_bytes = settings.max_header_bytes
        self.write_timeout_ms = int(settings.write_timeout_s * 1000)
        self.limits = {"max_connections": self.max_connections, "header_timeout_s": self.header_timeout_s,
                       "max_header_bytes": self.max_header_bytes, "write_timeout_s": settings.write_timeout_s}
        self.waiting: dict[GuardedHttpToolsProtocol, None] = {}
        self.stats = {"evicted_idle": 0, "refused": 0, "header_timeouts": 0, "headers_too_large": 0}


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the guards of the module docstring; `guard` is set per
    server by `guarded_protocol`."""

    guard: ConnectionGuard

    def connection_made(self, transport: Any) -> None:  # type: ignore[override]
        super().connection_made(transport)
        guard = self.guard
        sock = transport.get_extra_info("socket")
        if TCP_USER_TIMEOUT is not None and sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, TCP_USER_TIMEOUT, guard.write_timeout_ms)
        self._rejected = False
        self._deferred_error: bytes | None = None  # written once the answers in progress are
        # bytes still to come of the body of a request whose upgrade is ignored (`_upgrade_body`)
        self._upgrade_body_left = 0
        self._header_timer = None
        self._arrival: float | None = None
        if len(self.connections) > guard.max_connections and not self._make_room():
            guard.stats["refused"] += 1
            self._reject(503, "Service Unavailable", "too_many_connections",
                         f"the server has {guard.max_connections} connections open {set_by('max_connections')}; "
                         "retry later")
            return
        self._await_request()

    def _make_room(self) -> bool:
        for victim in self.guard.waiting:
            if victim is not self:
                self.guard.stats["evicted_idle"] += 1
                victim._close_waiting()
                return True
        return False

    def _close_waiting(self) -> None:
        self.guard.waiting.pop(self, None)
        self._cancel_header_timer()
        self._rejected = True
        self.transport.close()

    def _await_request(self, timed: bool = True) -> None:
        """The connection waits for a request: timed from now (a new connection), or
        untimed between requests, where uvicorn's keep-alive timeout runs until the next
        request's first byte starts the header timer."""
        self.guard.waiting[self] = None
        self._header_bytes = 0
        self._cancel_header_timer()
        if timed:
            self._header_timer = self.loop.call_later(self.guard.header_timeout_s, self._header_timeout)

    def _cancel_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _header_timeout(self) -> None:
        self._header_timer = None
        if self._rejected or self.transport.is_closing():
            return
        self.guard.stats["header_timeouts"] += 1
        self._reject(408, "Request Timeout", "request_timeout",
                     f"request headers not received within {self.guard.header_timeout_s:g} s {set_by('header_timeout_s')}")

    def _reject(self, status: int, reason: str, code: str, message: str) -> None:
        """Answer an error and close; nothing more of the connection is read. When a request read
        whole before it is still being answered, the error waits for that answer."""
        self._rejected = True
        self.guard.waiting.pop(self, None)
        self._cancel_header_timer()
        if self.transport.is_closing():
            return
        if self._answering():
            self._deferred_error = _json_response(status, reason, code, message)
            self.flow.pause_reading()
            return
        self.transport.write(_json_response(status, reason, code, message))
        self.transport.close()

    def _answering(self) -> bool:
        """A request received whole (or queued behind one) is still being answered."""
        cycle = self.cycle
        return bool(self.pipeline) or (cycle is not None and not cycle.response_complete and not cycle.more_body)

    def connection_lost(self, exc: Exception | None) -> None:
        self.guard.waiting.pop(self, None)
        self._cancel_header_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._rejected:
            return
        if self._upgrade_body_left:
            data = self._upgrade_body(data)
            if not data:
                return
        waiting = self in self.guard.waiting
        if waiting:
            self._header_bytes += len(data)
        # uvicorn's data_received, except that a parser error we caused ourselves (a
        # _Rejected raised from a callback, which httptools wraps) is not logged as the
        # client's invalid request
        self._unset_keepalive_if_required()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade as upgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            elif self._upgrade_body_left:  # what follows the headers is the body, then maybe a next request
                rest = self._upgrade_body(data[upgrade.args[0]:])
                if rest:
                    self.data_received(rest)
            return
        except httptools.HttpParserError:
            if not self._rejected:
                self.logger.warning("Invalid HTTP request received.")
                self.send_400_response("Invalid HTTP request received.")
            return
        if self._rejected:
            return
        if self in self.guard.waiting and self._header_bytes > self.guard.max_header_bytes:
            self._too_large()

    def _too_large(self) -> None:
        self.guard.stats["headers_too_large"] += 1
        self._reject(431, "Request Header Fields Too Large", "headers_too_large",
                     f"request line and headers over {self.guard.max_header_bytes} bytes {set_by('max_header_bytes')}")

    def _unsupported_upgrade_warning(self) -> None:
        # uvicorn logs two WARNING lines per request that asks for an upgrade it does not make:
        # a line any client could make the server write for every request
        self.logger.debug("upgrade not made; the request is answered in HTTP/1.1")

    def on_message_complete(self) -> None:
        if self.parser.should_upgrade() and not self._should_upgrade() and not self._rejected:
            # httptools skips the body of a request that asks for an upgrade: read it here
            length, chunked = 0, False
            for name, value in self.headers:
                if name == b"content-length" and value.strip().isdigit():
                    length = int(value)
                elif name == b"transfer-encoding":
                    chunked = True
            if chunked:
                self._reject(400, "Bad Request", "bad_request", "a request that asks for an upgrade (Upgrade header) "
                             "must send its body with a Content-Length, not chunked; or send it without Upgrade")
                return
            if length:
                self._upgrade_body_left = length
                return
        super().on_message_complete()

    def _upgrade_body(self, data: bytes) -> bytes:
        """Hand the app the body bytes of `data` of a request whose upgrade is ignored; the
        request is complete once all have come. Returns what follows the body."""
        body, rest = data[:self._upgrade_body_left], data[self._upgrade_body_left:]
        self._upgrade_body_left -= len(body)
        self.on_body(body)
        if not self._upgrade_body_left:
            super().on_message_complete()
        return rest

    def send_400_response(self, msg: str) -> None:
        if self._rejected:  # our own _Rejected, surfacing as a parser error
            return
        self._reject(400, "Bad Request", "bad_request", "invalid HTTP request")

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._arrival = self.loop.time()
        if self not in self.guard.waiting:  # pipelined right behind the previous request
            self._await_request()
        elif self._header_timer is None:  # first byte after a keep-alive pause
            self._header_timer = self.loop.call_later(self.guard.header_timeout_s, self._header_timeout)

    def on_headers_complete(self) -> None:
        size = len(self.url) + sum(len(n) + len(v) + 4 for n, v in self.headers)
        if size > self.guard.max_header_bytes:
            self._too_large()
            raise _Rejected
        if sum(name == b"host" for name, _ in self.headers) > 1:
            self._reject(400, "Bad Request", "bad_request", "more than one Host header: send one (RFC 9112 3.2)")
            raise _Rejected
        if self.url[:1] != b"/" and b"://" in self.url[:9]:
            self._use_request_line_authority()
        self.guard.waiting.pop(self, None)
        self._cancel_header_timer()
        self.scope["state"]["attserve_arrival"] = self._arrival
        super().on_headers_complete()

    def _use_request_line_authority(self) -> None:
        """An absolute-form request line (`POST http://host:port/path`): its authority becomes
        the Host header, every Host the client sent dropped (RFC 9112 3.2.2)."""
        authority = self.url.split(b"://", 1)[1]
        for end in (b"/", b"?", b"#"):
            authority = authority.split(end, 1)[0]
        if not authority or b"@" in authority:
            # RFC 9110 4.2.4: user information in an http(s) URI is to be treated as an error
            self._reject(400, "Bad Request", "bad_request", "invalid request line: its authority must be a host "
                         "and an optional port")
            raise _Rejected
        self.headers[:] = [(n, v) for n, v in self.headers if n != b"host"] + [(b"host", authority)]

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self._deferred_error is not None:
            if not self.pipeline and self.cycle.response_complete and not self.transport.is_closing():
                self._unset_keepalive_if_required()
                self.transport.write(self._deferred_error)
                self.transport.close()
            return
        if not self._rejected and not self.transport.is_closing() and not self.pipeline:
            self._await_request(timed=False)

    def timeout_keep_alive_handler(self) -> None:
        self.guard.waiting.pop(self, None)
        self._cancel_header_timer()
        super().timeout_keep_alive_handler()


def guarded_protocol(settings: Settings) -> type[GuardedHttpToolsProtocol]:
    """The protocol class for uvicorn.Config(http=...), bound to these settings: a subclass
    with its own guard, so two servers in one process (tests) share no state."""
    guard = ConnectionGuard(settings)
    return type("GuardedHttpToolsProtocol", (GuardedHttpToolsProtocol,),
                {"guard": guard, "limits": guard.limits, "stats": guard.stats})
