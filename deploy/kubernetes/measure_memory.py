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
import sys
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from bench.harness import ServiceProcess  # noqa: E402  the one way the service is started as a process
from core.tasks import TASKS  # noqa: E402
from service.http.schemas import TASK_SCHEMAS  # noqa: E402
from service.settings import Settings  # noqa: E402

WORDS = "the quick brown fox jumps over the lazy dog near the river bank".split()
# a full batch request: as many inputs as the service takes, within its characters per request
MAX_INPUTS = Settings.model_fields["max_inputs_per_request"].default
MAX_REQUEST_CHARS = Settings.model_fields["max_request_chars"].default


def text_over(max_tokens: int) -> str:
    """A text of more words than `max_tokens`, so the model cuts it to its longest shape."""
    return " ".join(WORDS[i % len(WORDS)] for i in range(max_tokens + 8))


def memory_mib(pid: int) -> dict[str, float]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = round(int(value.split()[0]) / 1024, 1)
    return fields


def requests_for(models: list[dict]) -> list[tuple[str, dict]]:
    """Per served model, one single-item request at its longest shapes (a list field filled to
    its max_evidence) and, for a task with a batch form, the largest batch of them the service
    accepts (its default max_inputs_per_request and max_request_chars)."""
    out = []
    for model in models:
        task = TASKS[model["task"]]
        item = {}
        for field in task.fields:
            text = text_over(model["max_lengths"][field.input])
            item[field.name] = [text] * (model.get("max_evidence") or 5) if field.many else text
        out.append((task.endpoint, {**item, "model": model["name"]}))
        if TASK_SCHEMAS[task.name].has_batch_form:
            chars = sum(len(t) for v in item.values() for t in (v if isinstance(v, list) else [v]))
            inputs = min(MAX_INPUTS, MAX_REQUEST_CHARS // chars)
            out.append((task.endpoint, {"inputs": [item] * inputs, "model": model["name"]}))
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
    parser.add_argument("--log", type=Path, default=REPO / "runs" / "measure_memory.log", help="the service's log")
    args = parser.parse_args()

    service = ServiceProcess(args.model_repository, args.log, inherit_settings=False, device="cpu", log_level="WARNING")
    started = time.monotonic()
    with service.start(timeout_s=300):
        ready_s = time.monotonic() - started
        warm = memory_mib(service.pid)
        models = httpx.get(f"{service.base}/v1/models", timeout=10).json()["models"]
        statuses = asyncio.run(load(service.base, requests_for(models), args.seconds, args.concurrency))
        loaded = memory_mib(service.pid)
    print(json.dumps({
        "models": len(models), "ready_s": round(ready_s, 1),
        "after_warmup_mib": warm, "after_load_mib": loaded,
        "load": {"seconds": args.seconds, "concurrency": args.concurrency, "statuses": statuses},
    }, indent=2))


if __name__ == "__main__":
    main()
