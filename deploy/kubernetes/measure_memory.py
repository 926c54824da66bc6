"""Resident memory of the real service with the bundled models, for the pod's memory request and
limit (deploy/kubernetes/README.md, "Resources").

Starts `python -m service` on a free loopback port with the repository's `model_repository/`,
reads VmRSS / VmHWM from /proc/PID/status once every model is warm, then sends a bounded load
to every model: concurrent single-item requests and full 64-input batches of long texts (every
text cut at the model's max length, so each batch uses the largest shapes the bundles allow),
and reads them again. Loopback only; stops by itself after `--seconds`.

    .venv/bin/python deploy/kubernetes/measure_memory.py --seconds 20
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]
WORDS = "the quick brown fox jumps over the lazy dog near the river bank".split()


def text_over(max_tokens: int) -> str:
    """A text of more words than `max_tokens`, so the model cuts it to its longest shape (yet
    64 of them stay under ATTSERVE_MAX_REQUEST_CHARS)."""
    return " ".join(WORDS[i % len(WORDS)] for i in range(max_tokens + 8))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def memory_mib(pid: int) -> dict[str, float]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = round(int(value.split()[0]) / 1024, 1)
    return fields


def requests_for(models: list[dict]) -> list[tuple[str, dict]]:
    """One single-item and one full batch (64 inputs at the longest shapes) per served model."""
    out = []
    for model in models:
        task, name = model["task"], model["name"]
        longest = {field.removesuffix("_ids"): text_over(n) for field, n in model["max_lengths"].items()}
        if task == "classification":
            path, item = "/classify", {"text": longest["input"]}
        elif task == "entailment":
            path, item = "/entailment", {"premise": longest["premise"], "hypothesis": longest["hypothesis"]}
        else:
            evidence = [longest["evidence"]] * (model.get("max_evidence") or 5)
            path, item = "/verify", {"claim": longest["claim"], "evidence": evidence}
        out.append((path, {**item, "model": name}))
        out.append((path, {"inputs": [item] * 64, "model": name}))
    return out


async def load(url: str, requests: list[tuple[str, dict]], seconds: float, concurrency: int) -> dict[str, int]:
    counts: dict[str, int] = {}
    deadline = time.monotonic() + seconds

    async def worker(client: httpx.AsyncClient, offset: int) -> None:
        i = offset
        while time.monotonic() < deadline:
            path, body = requests[i % len(requests)]
            status = (await client.post(url + path, json=body)).status_code
            counts[str(status)] = counts.get(str(status), 0) + 1
            i += 1

    async with httpx.AsyncClient(timeout=60) as client:
        await asyncio.gather(*(worker(client, k) for k in range(concurrency)))
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--model-repository", type=Path, default=REPO / "model_repository")
    args = parser.parse_args()

    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ATTSERVE_")}
    env.update(ATTSERVE_HOST="127.0.0.1", ATTSERVE_PORT=str(port), ATTSERVE_DEVICE="cpu",
               ATTSERVE_MODEL_REPOSITORY=str(args.model_repository), ATTSERVE_LOG_LEVEL="WARNING")
    url = f"http://127.0.0.1:{port}"
    process = subprocess.Popen([sys.executable, "-m", "service"], cwd=REPO, env=env)
    try:
        started = time.monotonic()
        while True:
            if process.poll() is not None:
                raise SystemExit(f"service exited with {process.returncode}")
            try:
                if httpx.get(f"{url}/health/ready", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() - started > 300:
                raise SystemExit("service not ready after 300 s")
            time.sleep(0.2)
        ready_s = time.monotonic() - started
        warm = memory_mib(process.pid)
        models = httpx.get(f"{url}/v1/models", timeout=10).json()
        models = models.get("models", models) if isinstance(models, dict) else models
        statuses = asyncio.run(load(url, requests_for(models), args.seconds, args.concurrency))
        loaded = memory_mib(process.pid)
        print(json.dumps({
            "models": len(models), "ready_s": round(ready_s, 1),
            "after_warmup_mib": warm, "after_load_mib": loaded,
            "load": {"seconds": args.seconds, "concurrency": args.concurrency, "statuses": statuses},
        }, indent=2))
    finally:
        process.terminate()
        process.wait(timeout=60)


if __name__ == "__main__":
    main()
