"""granian against uvicorn: the bare HTTP floor (bench/floor_app.py) and the
service's app, each under both servers, interleaved rounds, server pinned to core 0 and wrk to
core 1, single-pair /entailment bodies at c=32. The service runs here under plain uvicorn, not
`attserve serve`'s guarded protocol (service/http.py), so both servers run the same app with the
same (no) connection guards.

granian is not a dependency: install it beside the project, then point GRANIAN_SITE there.

    pip install --target /tmp/granian-site granian
    GRANIAN_SITE=/tmp/granian-site ROUNDS=3 python -m bench.granian_ab     # OUT=...json
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

from bench import loadgen, servers
from bench.workloads import test_examples, write_bodies

REPO = servers.REPO


def granian_spec(port: int, target: str, env: dict[str, str], site: str) -> servers.ServerSpec:
    argv = [sys.executable, "-m", "granian", "--interface", "asgi", "--host", "127.0.0.1", "--port", str(port),
            "--workers", "1", "--loop", "uvloop", "--no-ws", "--log-level", "warning", "--factory", target]
    return servers.ServerSpec("granian", port, argv, {**env, "PYTHONPATH": f"{REPO}{os.pathsep}{site}"})


def arms(site: str) -> dict[str, servers.ServerSpec]:
    port = servers.free_port
    service_env = servers.service_spec(0, REPO / "model_repository", "snli-attconv-light", max_batch_size=32,
                                       max_batch_delay_ms=2.0, intra_op_threads=1).env
    return {
        "floor-uvicorn": servers.floor_spec(port()),
        "floor-granian": granian_spec(port(), "bench.floor_app:create_app", {"BENCH_FLOOR_JSON": "stdlib"}, site),
        "service-uvicorn": servers.uvicorn_spec("service", "service.app:create_app", port(), service_env,
                                                servers.UvicornOptions()),
        "service-granian": granian_spec(port(), "service.app:create_app", service_env, site),
    }


def main() -> None:
    site = os.environ.get("GRANIAN_SITE", "/tmp/granian-site")
    bodies = Path(tempfile.mkdtemp(prefix="granian-ab-"))
    write_bodies(test_examples("snli", None, 2000), bodies)
    results: dict[str, list[dict]] = {name: [] for name in arms(site)}
    for round_ in range(int(os.environ.get("ROUNDS", 3))):
        for name, spec in arms(site).items():
            with servers.Server(spec, "0", bodies / "logs") as server:
                loadgen.closed_loop(server.url, "/entailment", bodies / "single.jsonl", 32, 2, "1")
                measured = loadgen.closed_loop(server.url, "/entailment", bodies / "single.jsonl", 32, 10, "1")
            print(round_, name, measured["requests_per_s"], measured["latency_ms"]["p99"], measured["errors"], flush=True)
            results[name].append(measured)
    summary = {name: {"median_rps": statistics.median(x["requests_per_s"] for x in runs),
                      "runs": [x["requests_per_s"] for x in runs],
                      "p99_ms": statistics.median(x["latency_ms"]["p99"] for x in runs)} for name, runs in results.items()}
    print(json.dumps(summary, indent=1))
    out = Path(os.environ.get("OUT", "bench/results/entry-37/granian-ab.json"))
    out.write_text(json.dumps({"summary": summary, "runs": results}, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
