"""The service as a process, as users run it: `ServiceProcess` (`python -m service` on a free local
port), and what watches it from outside (its resident memory, its /metrics). The one way the
tests, the bench's deploy checks and the reliability runs start the service as a process."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import httpx

from bench.servers import free_port


REPO = Path(__file__).resolve().parents[1]

# a drain after SIGTERM exits 0 (service.process.server.DrainingServer); the "stopped" log line tells it ran
GRACEFUL_EXIT_CODES = (0,)


class ServiceProcess:
    """`python -m service` on a free local port with `ATTSERVE_*` settings; its JSON log lines
    (stderr) go to `log_path`, which stays behind for inspection. The one way the tests, the
    bench's deploy checks and the reliability runs start the service as users do.

    `python_args` go to the interpreter (`("-X", "importtime")` traces every import into the
    log); `inherit_settings=False` drops the `ATTSERVE_*` variables of the caller's environment,
    so only `settings` configure it."""

    def __init__(self, repository: Path, log_path: Path, *, python_args: Sequence[str] = (),
                 inherit_settings: bool = True, **settings: Any) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_path = Path(log_path)
        self.python_args = tuple(python_args)
        inherited = os.environ if inherit_settings else {k: v for k, v in os.environ.items()
                                                          if not k.startswith("ATTSERVE_")}
        self.env = {
            **inherited,
            "ATTSERVE_HOST": "127.0.0.1",
            "ATTSERVE_PORT": str(self.port),
            "ATTSERVE_MODEL_REPOSITORY": str(repository),
            **{f"ATTSERVE_{key.upper()}": str(value) for key, value in settings.items()},
        }
        self.proc: subprocess.Popen | None = None

    def start(self, ready: bool = True, timeout_s: float = 120.0) -> "ServiceProcess":
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "w") as stderr:  # the child keeps its own descriptor
            self.proc = subprocess.Popen([sys.executable, *self.python_args, "-m", "service"], cwd=REPO, env=self.env,
                                         stdout=subprocess.DEVNULL, stderr=stderr)
        self.wait_for("/health/ready" if ready else "/health/live", timeout_s)
        return self

    def wait_for(self, path: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"service exited with {self.proc.returncode}: {self.log_path.read_text()[-3000:]}")
            try:
                if httpx.get(self.base + path, timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"{path} not 200 within {timeout_s} s; log: {self.log_path}")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def rss_bytes(self) -> int:
        """Resident set size from /proc (Linux)."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS in /proc status")

    def log_records(self) -> list[dict]:
        out = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            if line.startswith("{"):
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    pass
        return out

    def terminate(self, timeout_s: float = 60.0) -> float:
        """SIGTERM, wait for exit; returns the seconds it took (the process is killed, and
        RuntimeError raised, past `timeout_s`)."""
        start = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise RuntimeError(f"service did not exit within {timeout_s} s of SIGTERM") from None
        return time.monotonic() - start

    def __enter__(self) -> "ServiceProcess":
        return self if self.proc is not None else self.start()

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()



class RssSampler:
    """Samples a process's RSS every `every_s` seconds in the background: (t, bytes) pairs."""

    def __init__(self, server: ServiceProcess, every_s: float) -> None:
        self.server, self.every_s = server, every_s
        self.samples: list[tuple[float, int]] = []
        self._task: asyncio.Task | None = None

    async def _run(self) -> None:
        start = time.monotonic()
        while True:
            self.samples.append((time.monotonic() - start, self.server.rss_bytes()))
            await asyncio.sleep(self.every_s)

    def __enter__(self) -> "RssSampler":
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    def __exit__(self, *exc: object) -> None:
        self._task.cancel()
        self.samples.append((self.samples[-1][0] + self.every_s if self.samples else 0.0, self.server.rss_bytes()))


def scrape(base: str) -> dict[tuple[str, tuple], float]:
    """Every sample of /metrics: {(name, sorted labels): value}."""
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(base + "/metrics", timeout=10).text
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def metric_sum(samples: dict, name: str) -> float:
    return sum(v for (n, _), v in samples.items() if n == name)
