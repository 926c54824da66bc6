"""The LitServe peer: the same ONNX bundle served by LitServe with its own dynamic batching.

Runs in its own virtualenv (`.venv-peer-litserve`, bench.servers.ensure_litserve_venv). The
model code is bench.naive_ort_app.OnnxBundleModel (numpy, onnxruntime, the project's encoder);
the LitAPI only maps LitServe's hooks onto it: decode_request takes one input per request
(the body `{"premise": ..., "hypothesis": ...}`, our single-input form), LitServe gathers up to
`max_batch_size` requests waiting at most `batch_timeout` seconds, `batch` keeps the list,
`predict` runs one onnxruntime call, `unbatch` splits the answers. Tuned as the LitServe docs
describe: one API server process, access log off (uvicorn's `access_log=False`), log level
warning; the objects alive after `setup` are frozen out of the garbage collector, as in the
service.

    BENCH_PEER_BUNDLE=<bundle dir> BENCH_PEER_MAX_BATCH=32 BENCH_PEER_BATCH_TIMEOUT_S=0.005 \\
        python -m bench.peer_litserve --port 8000
"""

from __future__ import annotations

import argparse
import os
from typing import Any

import litserve as ls

from bench.naive_ort_app import OnnxBundleModel, freeze_gc

MAX_BATCH = int(os.environ.get("BENCH_PEER_MAX_BATCH", "32"))
BATCH_TIMEOUT_S = float(os.environ.get("BENCH_PEER_BATCH_TIMEOUT_S", "0.005"))


class BundleAPI(ls.LitAPI):
    def setup(self, device: str) -> None:
        self.model = OnnxBundleModel.from_env()
        self.model.predict([{"premise": "warm", "hypothesis": "up", "text": "warm up"}])
        freeze_gc()

    # No annotations on these two: LitServe reads them to build the route (none = parse the JSON body).
    def decode_request(self, request):
        return request

    def batch(self, inputs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return inputs

    def predict(self, x: Any) -> Any:
        if isinstance(x, list):
            return self.model.predict(x)
        return self.model.predict([x])[0]

    def unbatch(self, output: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return output

    def encode_response(self, output):
        return output


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--path", default="/entailment")
    args = parser.parse_args()
    api = BundleAPI(max_batch_size=MAX_BATCH, batch_timeout=BATCH_TIMEOUT_S, api_path=args.path)
    server = ls.LitServer(api, accelerator="cpu", devices=1, workers_per_device=1, timeout=30)
    server.run(host=args.host, port=args.port, num_api_servers=1, log_level="warning",
               generate_client_file=False, access_log=False)


if __name__ == "__main__":
    main()
