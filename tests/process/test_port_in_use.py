"""A port already in use exits with its own code (4), not 3 (a bundle that fails to
load), in one line, before any bundle loads."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_busy_port_exits_4_in_one_line():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        port = holder.getsockname()[1]
        env = {**os.environ, "PYTHONPATH": str(ROOT), "ATTSERVE_LOG_LEVEL": "CRITICAL"}
        done = subprocess.run([sys.executable, "-m", "service", "--host", "127.0.0.1", "--port", str(port),
                               "--models", "bbc-act"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 4, (done.returncode, done.stderr[-2000:])
    lines = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and f"port {port}" in lines[0] and "already in use" in lines[0], done.stderr[-2000:]


def test_the_readme_documents_the_exit_codes():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("### Configuration"):]
    for row in ("| 2 |", "| 3 |", "| 4 |"):
        assert row in section[:section.index("\n## ")], row
