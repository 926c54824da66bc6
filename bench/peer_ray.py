"""The Ray Serve peer: the same ONNX bundle served by Ray Serve with its own batching.

Runs in its own virtualenv (`.venv-peer-ray`, bench.servers.ensure_ray_venv). Starts a local
Ray instance (as many CPUs as replicas, no dashboard), one deployment with
`BENCH_PEER_REPLICAS` replicas (default 1) of 1 CPU each, and
`@serve.batch(max_batch_size, batch_wait_timeout_s)` around the model call, which is
bench.naive_ort_app.OnnxBundleModel (numpy, onnxruntime, the project's encoder). Body: one
input per request, `{"premise": ..., "hypothesis": ...}` (our single-input form). Tuned as
Ray's docs describe: access logs off (`LoggingConfig(enable_access_log=False)`, for the
proxy through `serve.start(logging_config=...)` and for the deployment), log level warning,
`RAY_SERVE_THROUGHPUT_OPTIMIZED=1` (set by bench.servers.ray_spec: Ray's high-throughput mode);
the replica freezes what is alive after loading out of the garbage collector, as the service
does. Ray's proxy, controller and replica are separate processes; bench.servers pins the whole
process tree to one core like every other server.

    BENCH_PEER_BUNDLE=<bundle dir> BENCH_PEER_MAX_BATCH=32 BENCH_PEER_BATCH_WAIT_S=0.005 \\
        python -m bench.peer_ray --port 8000

Ends (ray.shutdown) on SIGTERM or SIGINT. Ray's actors run in their own process groups, so
bench.servers.Server stops a Ray peer by its whole session (`kill_session`).
"""

from __future__ import annotations

import argparse
import os
import signal
import threading

import ray
from ray import serve
from ray.serve.schema import LoggingConfig
from starlette.requests import Request
from starlette.responses import JSONResponse

MAX_BATCH = int(os.environ.get("BENCH_PEER_MAX_BATCH", "32"))
BATCH_WAIT_S = float(os.environ.get("BENCH_PEER_BATCH_WAIT_S", "0.005"))
REPLICAS = int(os.environ.get("BENCH_PEER_REPLICAS", "1"))
QUIET = LoggingConfig(enable_access_log=False, log_level="WARNING")


@serve.deployment(num_replicas=1, ray_actor_options={"num_cpus": 1}, max_ongoing_requests=256,
                  logging_config=QUIET)
class BundleDeployment:
    def __init__(self) -> None:
        from bench.naive_ort_app import OnnxBundleModel, freeze_gc

        self.model = OnnxBundleModel.from_env()
        self.model.predict([{"premise": "warm", "hypothesis": "up", "text": "warm up"}])
        freeze_gc()

    @serve.batch(max_batch_size=MAX_BATCH, batch_wait_timeout_s=BATCH_WAIT_S)
    async def predict(self, inputs: list[dict]) -> list[dict]:
        return self.model.predict(inputs)

    async def __call__(self, request: Request):
        if request.method == "GET":  # /health/ready once the replica answers
            return JSONResponse({"status": "ready"})
        return JSONResponse(await self.predict(await request.json()))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    pythonpath = os.environ.get("PYTHONPATH", "")
    env = {k: os.environ[k] for k in ("BENCH_PEER_BUNDLE", "BENCH_PEER_THREADS", "RAY_SERVE_THROUGHPUT_OPTIMIZED")
           if k in os.environ}
    ray.init(num_cpus=REPLICAS, include_dashboard=False, log_to_driver=False, logging_level="warning",
             runtime_env={"env_vars": {**env, "PYTHONPATH": pythonpath}})
    serve.start(http_options={"host": args.host, "port": args.port}, logging_config=QUIET)
    serve.run(BundleDeployment.options(num_replicas=REPLICAS).bind(), name="peer", route_prefix="/", logging_config=QUIET)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    ray.shutdown()  # serve.shutdown() first can hang for minutes; the bench also ends the whole session


if __name__ == "__main__":
    main()
