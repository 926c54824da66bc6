"""Assertions of docker/smoke.sh that read JSON (stdlib only; runs on the host's python3).

  checks.py hardening COMPOSE_JSON SERVICE CONTAINER
      The container runs under exactly what docker-compose.yml sets for SERVICE (read_only,
      tmpfs, cap_drop, security_opt, mem_limit, pids_limit), seen by podman inspect and, for
      capabilities, no-new-privileges and the read-only root, from inside the container.
  checks.py single-ports COMPOSE_JSON
      No service publishes a port range (podman rejects them).
  checks.py scrape PROMETHEUS_URL JOB EXPECTED_JSON TIMEOUT_S
      Prometheus has `up{job=JOB} == 1` for every target and, within TIMEOUT_S, scraped
      attserve_requests_total equal to EXPECTED_JSON ({"endpoint/status": count}).
Exit status 1 with one line `SMOKE FAIL: ...` on stderr when a check fails.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.parse
import urllib.request


def fail(message: str) -> None:
    print(f"SMOKE FAIL: {message}", file=sys.stderr)
    sys.exit(1)


def podman(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["podman", *args], capture_output=True, text=True, timeout=60)


def hardening(compose_json: str, service: str, container: str) -> None:
    want = json.load(open(compose_json))["services"][service]
    (got,) = json.loads(podman("inspect", container).stdout)
    host = got["HostConfig"]
    where = f"{service} ({container})"
    status = podman("exec", container, "cat", "/proc/1/status").stdout
    proc = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
    checked = []
    if want.get("read_only"):
        if not host.get("ReadonlyRootfs"):
            fail(f"{where}: compose sets read_only but the root filesystem is writable")
        probe = podman("exec", container, "sh", "-c", "echo x > /.smoke-probe")
        if probe.returncode == 0 or "Read-only file system" not in probe.stderr:
            fail(f"{where}: writing to / did not fail with 'Read-only file system': {probe.stderr.strip()}")
        checked.append("read_only")
    for entry in want.get("tmpfs", []):
        path = entry.split(":", 1)[0]
        if path not in (host.get("Tmpfs") or {}):
            fail(f"{where}: compose mounts a tmpfs on {path}, the container has {host.get('Tmpfs')}")
        probe = podman("exec", container, "sh", "-c", f"echo x > {path}/.smoke-probe && rm {path}/.smoke-probe")
        if probe.returncode != 0:
            fail(f"{where}: the tmpfs {path} is not writable: {probe.stderr.strip()}")
        checked.append(f"tmpfs {path}")
    if "ALL" in [c.upper() for c in want.get("cap_drop", [])]:
        for field in ("CapPrm", "CapEff", "CapBnd"):
            if int(proc[field].strip(), 16) != 0:
                fail(f"{where}: compose drops ALL capabilities, PID 1 has {field}={proc[field].strip()}")
        checked.append("cap_drop ALL (CapPrm/CapEff/CapBnd = 0)")
    if any(o.startswith("no-new-privileges") and not o.endswith(":false") for o in want.get("security_opt", [])):
        if proc.get("NoNewPrivs", "").strip() != "1":
            fail(f"{where}: compose sets no-new-privileges, PID 1 has NoNewPrivs={proc.get('NoNewPrivs')}")
        checked.append("no-new-privileges")
    if "mem_limit" in want:
        if int(host.get("Memory", 0)) != int(want["mem_limit"]):
            fail(f"{where}: compose mem_limit is {want['mem_limit']} bytes, the container has {host.get('Memory')}")
        checked.append(f"mem_limit {int(want['mem_limit']) >> 20} MiB")
    if "pids_limit" in want:
        if int(host.get("PidsLimit") or 0) != int(want["pids_limit"]):
            fail(f"{where}: compose pids_limit is {want['pids_limit']}, the container has {host.get('PidsLimit')}")
        checked.append(f"pids_limit {want['pids_limit']}")
    print(f"{where}: runs under compose's {', '.join(checked)}")


def single_ports(compose_json: str) -> None:
    """podman(-compose) rejects a published range such as `8000-8009:8000` ("host and container
    port ranges have different lengths"); Docker Compose accepts it. Only single ports keep
    docker-compose.yml portable."""
    ranges = [f"{name}: {port.get('published')}:{port.get('target')}"
              for name, service in json.load(open(compose_json))["services"].items()
              for port in service.get("ports", []) if "-" in str(port.get("published", ""))]
    if ranges:
        fail(f"docker-compose.yml publishes port ranges, which podman rejects: {ranges}")
    print("docker-compose.yml: every published port is a single port (portable to podman-compose)")


def query(base: str, expr: str) -> list[dict]:
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=10) as response:
        body = json.load(response)
    if body.get("status") != "success":
        fail(f"Prometheus query {expr!r} failed: {body}")
    return body["data"]["result"]


def scrape(base: str, job: str, expected_json: str, timeout_s: str) -> None:
    expected = {k: float(v) for k, v in json.loads(expected_json).items()}
    deadline = time.monotonic() + float(timeout_s)
    up: list[dict] = []
    counted: dict[str, float] = {}
    last_error = "none"
    while time.monotonic() < deadline:
        try:
            up = query(base, f'up{{job="{job}"}}')
            counted = {f"{r['metric'].get('endpoint')}/{r['metric'].get('status')}": float(r["value"][1])
                       for r in query(base, f'sum by (endpoint, status) (attserve_requests_total{{job="{job}"}})')}
        except OSError as error:  # a slow or not yet listening Prometheus: ask again
            last_error = repr(error)
        if up and all(r["value"][1] == "1" for r in up) and counted == expected:
            print(f"prometheus: up{{job=\"{job}\"}} == 1 for {len(up)} target(s), "
                  f"attserve_requests_total scraped = sent {json.dumps(expected)}")
            return
        time.sleep(1)
    if not up:
        fail(f"Prometheus has no target for job {job!r} after {timeout_s} s (scrape config?); targets: {targets(base)}")
    down = [r["metric"].get("instance") for r in up if r["value"][1] != "1"]
    if down:
        fail(f"Prometheus cannot scrape job {job!r}: up == 0 for {down}; targets: {targets(base)}")
    fail(f"attserve_requests_total scraped by Prometheus is {json.dumps(counted)}, the smoke sent "
         f"{json.dumps(expected)}; targets: {targets(base)}; last query error: {last_error}")


def targets(base: str) -> str:
    """The active targets, briefly: where Prometheus scrapes, when it last did, its last error."""
    try:
        with urllib.request.urlopen(f"{base}/api/v1/targets", timeout=10) as response:
            active = json.load(response)["data"]["activeTargets"]
    except OSError as error:
        return str(error)
    return json.dumps([{k: t.get(k) for k in ("scrapeUrl", "health", "lastScrape", "lastError")} for t in active])


if __name__ == "__main__":
    command, *args = sys.argv[1:]
    {"hardening": hardening, "scrape": scrape, "single-ports": single_ports}[command](*args)
