"""An OTLP/HTTP traces endpoint that accepts and counts, for measuring what tracing costs the
service (issue 54) without a collector's own load on the machine: it answers every
`POST /v1/traces` 200 at once and counts the spans of each ExportTraceServiceRequest.

    python -m bench.otlp_sink --port 4318 &     # then ATTSERVE_OTLP_ENDPOINT=http://127.0.0.1:4318

On exit (SIGTERM or SIGINT) it prints one JSON line: requests, spans, bytes received.
"""

from __future__ import annotations

import http.server
import json
import signal
import sys
import threading
from typing import Annotated

import typer

app = typer.Typer(add_completion=False)


class _Counts:
    requests = spans = received = 0
    lock = threading.Lock()


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the exporter's requests session uses it

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        spans = sum(len(scope.spans) for rs in ExportTraceServiceRequest.FromString(body).resource_spans
                    for scope in rs.scope_spans)
        with _Counts.lock:
            _Counts.requests += 1
            _Counts.spans += spans
            _Counts.received += len(body)
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@app.command()
def main(port: Annotated[int, typer.Option()] = 4318, host: Annotated[str, typer.Option()] = "127.0.0.1") -> None:
    server = http.server.ThreadingHTTPServer((host, port), _Handler)

    def stop(*_: object) -> None:
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    server.serve_forever()
    print(json.dumps({"requests": _Counts.requests, "spans": _Counts.spans, "bytes": _Counts.received}), flush=True)
    sys.exit(0)


if __name__ == "__main__":
    app()
