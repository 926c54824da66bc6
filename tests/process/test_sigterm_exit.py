"""SIGTERM to a one-worker server, started as users start it (`python -m service`, `attserve
serve`): the request in flight is answered, then the process exits 0 (README's exit codes), not
143 (killed by the signal). The two-worker path: tests/process/test_workers.py."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from bench.harness import ServiceProcess

REPO = Path(__file__).resolve().parents[2]

ENTRY_POINTS = {
    "python -m service": ("-m", "service"),
    "attserve serve": ("-m", "cli.main", "serve"),  # the `attserve` script is cli.main:app
}


@pytest.mark.parametrize("command", ENTRY_POINTS)
def test_sigterm_on_one_worker_answers_the_request_in_flight_and_exits_0(command, service_bundles, tmp_path):
    # ServiceProcess's settings (a free port, the test bundles) with this entry point's argv
    server = ServiceProcess(service_bundles, tmp_path / "service.log", models="topic", workers=1,
                            max_batch_delay_ms=500, max_batch_size=64, shutdown_timeout_s=10)
    with open(server.log_path, "w") as log:
        server.proc = subprocess.Popen([sys.executable, *ENTRY_POINTS[command]], cwd=REPO, env=server.env,
                                       stdout=subprocess.DEVNULL, stderr=log)
    try:
        server.wait_for("/health/ready", timeout_s=60)

        async def request_then_sigterm() -> httpx.Response:
            async with httpx.AsyncClient(base_url=server.base, timeout=30) as client:
                in_flight = asyncio.ensure_future(client.post("/classify", json={"text": "the team won the cup"}))
                await asyncio.sleep(0.25)  # queued: its batch closes 500 ms after its first item
                server.proc.send_signal(signal.SIGTERM)
                return await in_flight

        answer = asyncio.run(request_then_sigterm())
        code = server.proc.wait(timeout=20)
    finally:
        if server.proc.poll() is None:
            server.proc.kill()
            server.proc.wait()
    assert answer.status_code == 200 and answer.json()["model"] == "topic", answer.text
    assert code == 0, server.log_path.read_text(errors="replace")[-2000:]
    assert any(r["message"] == "stopped" for r in server.log_records()), "the drain did not finish"
