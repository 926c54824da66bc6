"""Where the service's time goes under load: py-spy samples the running server (its own
process, by pid, without pausing it) during one extra closed-loop run, and the collapsed stacks
are summed into the share of samples per thread, per layer and per function.

Layers are matched on the frame's file path, inclusive (a sample counts once for every layer
on its stack), so they need not add up to 100 %.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

from bench.loadgen import pinned

SAMPLE_RATE = 200  # Hz
# layer -> substrings of the frame's file path
LAYERS = {
    "onnxruntime session.run": ("onnxruntime/capi",),
    "service batcher": ("service/inference/batcher.py",),
    "service routes (validate, encode, answer)": ("service/http/routes.py",),
    "tokenizers": ("core/tokenization.py",),
    "pydantic": ("pydantic",),
    "fastapi + starlette": ("fastapi/", "starlette/"),
    "uvicorn + httptools": ("uvicorn/", "httptools"),
    "json": ("json/",),
    "prometheus_client": ("prometheus_client/",),
    "asyncio": ("asyncio/",),
}
_FRAME = re.compile(r"^(?P<function>.*?) \((?P<file>.*?)(?::(?P<line>\d+))?\)$")


def executable() -> str | None:
    """py-spy on PATH, else beside this interpreter (a virtual environment used without
    activating it puts its scripts there and not on PATH)."""
    return shutil.which("py-spy") or shutil.which("py-spy", path=str(Path(sys.executable).parent))


def available() -> bool:
    return executable() is not None


def start(pid: int, seconds: int, out: Path, cpus: str | None) -> subprocess.Popen:
    argv = [executable() or "py-spy", "record", "--pid", str(pid), "--duration", str(seconds), "--rate", str(SAMPLE_RATE),
            "--format", "raw", "--threads", "--nonblocking", "--output", str(out)]
    return subprocess.Popen(pinned(argv, cpus), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def summarize(raw: str, top: int = 15) -> dict:
    """Collapsed stacks (`frame;frame;... count`, first frame the thread) -> shares."""
    total = 0
    threads: Counter = Counter()
    layers: Counter = Counter()
    own: Counter = Counter()
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = stack.split(";")
        total += n
        threads[frames[0].rpartition(": ")[2]] += n  # "thread (1234): MainThread" -> "MainThread"
        files = []
        for frame in frames[1:]:
            match = _FRAME.match(frame)
            files.append(match.group("file") if match else frame)
        for layer, needles in LAYERS.items():
            if any(needle in f for f in files for needle in needles):
                layers[layer] += n
        if len(frames) > 1:
            match = _FRAME.match(frames[-1])
            leaf = f"{match.group('function')} ({Path(match.group('file')).name})" if match else frames[-1]
            own[leaf] += n

    def share(counter: Counter, limit: int | None = None) -> dict:
        return {k: round(v / total, 3) for k, v in counter.most_common(limit)} if total else {}

    return {"samples": total, "rate_hz": SAMPLE_RATE, "threads": share(threads),
            "layers_inclusive": share(layers), "top_self": share(own, top)}
