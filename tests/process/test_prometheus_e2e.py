"""End to end with a real Prometheus: the real service (`python -m service`, tiny bundles) on a
free loopback port, scraped by the `prometheus` binary running docker/prometheus/prometheus.yml
with only its target swapped for that port. Traffic goes to every endpoint; the assertions
read Prometheus's query API. docker/ci-deps.sh installs Prometheus (Debian's package); without
it the Prometheus test skips. `running_service` and `send_traffic` are also used by
tests/deploy/test_deploy.py."""

from __future__ import annotations

import contextlib
import json
import math
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import httpx
import pytest

from bench.harness import ServiceProcess
from bench.servers import free_port
import yaml


REPO = Path(__file__).resolve().parents[2]
PROMETHEUS_CONFIG = REPO / "docker" / "prometheus" / "prometheus.yml"
DASHBOARD = REPO / "docker" / "grafana" / "dashboards" / "attserve.json"
JOB = "attserve"
ENDPOINTS = ("/classify", "/entailment", "/verify")
# Longer than any tiny bundle's max length, so the truncation counter moves too.
LONG_TEXT = " ".join(["the quick brown fox jumps over the lazy dog"] * 60)


@contextlib.contextmanager
def background_process(args: list[str], log_path: Path, **kwargs) -> Iterator[subprocess.Popen]:
    """A subprocess that is always gone afterwards: SIGTERM, then SIGKILL after 10 s."""
    with open(log_path, "wb") as log:
        process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, **kwargs)
        try:
            yield process
        finally:
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(timeout=10)


def wait_until_ok(url: str, process: subprocess.Popen, log_path: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"{process.args[0]} exited with {process.returncode} before {url} was ready:\n{_tail(log_path)}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.25)
    pytest.fail(f"{url} not ready after {timeout_s:.0f} s:\n{_tail(log_path)}")


def _tail(path: Path, lines: int = 40) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


# --- the service -----------------------------------------------------------------------------

@dataclass
class Service:
    url: str
    port: int
    # What send_traffic sent and got 200 for, per endpoint path.
    requests: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ENDPOINTS, 0))
    inputs: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ENDPOINTS, 0))


@contextlib.contextmanager
def running_service(repository: Path, workdir: Path) -> Iterator[Service]:
    """`python -m service` on a free loopback port serving `repository` (tests/bundles.py's
    tiny bundles), ready (models loaded and warm) when this yields; only these settings, none
    from the caller's environment."""
    with ServiceProcess(repository, workdir / "service.log", inherit_settings=False, device="cpu",
                        intra_op_threads=1, max_batch_delay_ms=2) as process:
        yield Service(url=process.base, port=process.port)


def send_traffic(service: Service, rounds: int) -> None:
    """Per round and endpoint: one single-input request and one batch of two (one input
    longer than any max length). Every answer must be 200."""
    singles = {
        "/classify": {"text": "a short note about the weather"},
        "/entailment": {"premise": "a man is playing a guitar", "hypothesis": "someone makes music"},
        "/verify": {"claim": "the river is long", "evidence": ["the river is very long", "it rains"]},
    }
    batches = {
        "/classify": {"inputs": [{"text": "good news today"}, {"text": LONG_TEXT}]},
        "/entailment": {"inputs": [{"premise": LONG_TEXT, "hypothesis": "a dog"},
                                   {"premise": "two cats sleep", "hypothesis": "animals rest"}]},
        "/verify": {"inputs": [{"claim": "paris is in france", "evidence": ["paris is the capital of france"]},
                               {"claim": LONG_TEXT, "evidence": ["an unrelated sentence", LONG_TEXT]}]},
    }
    with httpx.Client(base_url=service.url, timeout=30) as client:
        for _ in range(rounds):
            for endpoint in ENDPOINTS:
                for body, count in ((singles[endpoint], 1), (batches[endpoint], 2)):
                    response = client.post(endpoint, json=body)
                    assert response.status_code == 200, f"{endpoint}: {response.status_code} {response.text}"
                    service.requests[endpoint] += 1
                    service.inputs[endpoint] += count


# --- Prometheus ------------------------------------------------------------------------------

def dashboard_queries() -> list[tuple[str, str]]:
    """(panel title, PromQL) of every dashboard panel target, and the template variables'
    queries (Grafana's `label_values(...)`)."""
    dashboard = json.loads(DASHBOARD.read_text())
    out = [(panel["title"], target["expr"]) for panel in dashboard["panels"] for target in panel["targets"]]
    out += [(f"${v['name']}", v["query"]["query"]) for v in dashboard["templating"]["list"] if v["type"] == "query"]
    return out


def scrape_config_for(target: str) -> dict:
    """docker/prometheus/prometheus.yml with the attserve job's service discovery replaced by
    a static `target`, and a 1 s scrape interval so the test is short. Nothing else changes."""
    config = yaml.safe_load(PROMETHEUS_CONFIG.read_text())
    (job,) = [j for j in config["scrape_configs"] if j["job_name"] == JOB]
    for key in [k for k in job if k.endswith("_sd_configs")]:
        del job[key]
    job["static_configs"] = [{"targets": [target]}]
    job["scrape_interval"] = "1s"
    job["scrape_timeout"] = "1s"
    return config


class PrometheusAPI:
    def __init__(self, url: str) -> None:
        self.url = url

    def query(self, expr: str) -> list[dict]:
        response = httpx.get(f"{self.url}/api/v1/query", params={"query": expr}, timeout=10)
        body = response.json()
        assert response.status_code == 200 and body["status"] == "success", f"{expr}: {body}"
        return body["data"]["result"]

    def by_label(self, expr: str, label: str) -> dict[str, float]:
        return {row["metric"].get(label, ""): float(row["value"][1]) for row in self.query(expr)}


@pytest.fixture
def prometheus_binary() -> str:
    path = shutil.which("prometheus")
    if path is None:
        pytest.skip("`prometheus` is not installed; run docker/ci-deps.sh as root (Debian's prometheus package)")
    return path


def endpoint_label(values, endpoint: str) -> str:
    """The service's `endpoint` label value for a path ('/classify' or 'classify')."""
    matches = [v for v in values if v.strip("/") == endpoint.strip("/")]
    assert len(matches) == 1, f"no single endpoint label for {endpoint} in {sorted(values)}"
    return matches[0]


def poll(check, timeout_s: float, interval_s: float = 0.5):
    """Call `check` until it returns without AssertionError or the time is up (then re-raise)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return check()
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(interval_s)


# The bound covers this test's own work; building the shared bundles is the fixture's.
@pytest.mark.timeout(90, func_only=True)
def test_prometheus_scrapes_request_latency_and_batch_metrics(prometheus_binary, service_bundles, tmp_path):
    with running_service(service_bundles, tmp_path) as service, \
            tempfile.TemporaryDirectory(prefix="attserve-prometheus-") as prometheus_dir:
        workdir = Path(prometheus_dir)  # config, TSDB and log; removed after Prometheus has exited
        target = f"127.0.0.1:{service.port}"
        config_path = workdir / "prometheus.yml"
        config_path.write_text(yaml.safe_dump(scrape_config_for(target), sort_keys=False))
        prometheus_port = free_port()
        log_path = workdir / "prometheus.log"
        args = [
            prometheus_binary,
            f"--config.file={config_path}",
            f"--storage.tsdb.path={workdir / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{prometheus_port}",
        ]
        with background_process(args, log_path, cwd=workdir) as process:
            url = f"http://127.0.0.1:{prometheus_port}"
            wait_until_ok(f"{url}/-/ready", process, log_path, timeout_s=30)
            prometheus = PrometheusAPI(url)

            # The target is up, under the config's own job name.
            def target_up():
                assert prometheus.by_label(f'up{{job="{JOB}"}}', "instance") == {target: 1.0}
            poll(target_up, timeout_s=15)

            # Traffic over several scrapes, so rate() has increasing samples to work on.
            for _ in range(6):
                send_traffic(service, rounds=1)
                time.sleep(0.7)

            # Counters: Prometheus holds exactly what was sent, per endpoint.
            def counts_arrived():
                requests = prometheus.by_label(f'sum by (endpoint) (attserve_requests_total{{job="{JOB}", status="200"}})', "endpoint")
                inputs = prometheus.by_label(f'sum by (endpoint) (attserve_inputs_total{{job="{JOB}"}})', "endpoint")
                for endpoint in ENDPOINTS:
                    assert requests[endpoint_label(requests, endpoint)] == service.requests[endpoint]
                    assert inputs[endpoint_label(inputs, endpoint)] == service.inputs[endpoint]
                return requests
            labels = list(poll(counts_arrived, timeout_s=15))

            window = "[30s]"
            request_rate = prometheus.by_label(f'sum by (endpoint) (rate(attserve_requests_total{{job="{JOB}"}}{window}))', "endpoint")
            latency_rate = prometheus.by_label(
                f'sum by (endpoint) (rate(attserve_request_duration_seconds_count{{job="{JOB}"}}{window}))', "endpoint")
            p95 = prometheus.by_label(
                f'histogram_quantile(0.95, sum by (le, endpoint) (rate(attserve_request_duration_seconds_bucket{{job="{JOB}"}}{window})))',
                "endpoint")
            buckets = prometheus.by_label(f'count by (endpoint) (attserve_request_duration_seconds_bucket{{job="{JOB}"}})', "endpoint")
            # endpoint -> model, from the request counter's own labels
            served = prometheus.query(f'sum by (endpoint, model) (attserve_requests_total{{job="{JOB}", status="200"}})')
            model_of = {row["metric"]["endpoint"]: row["metric"]["model"] for row in served}
            batch_rate = prometheus.by_label(f'sum by (model) (rate(attserve_batch_size_count{{job="{JOB}"}}{window}))', "model")
            batch_items = prometheus.by_label(f'sum by (model) (attserve_batch_size_sum{{job="{JOB}"}})', "model")

            for endpoint in ENDPOINTS:
                label = endpoint_label(labels, endpoint)
                assert request_rate[label] > 0, f"rate(attserve_requests_total) of {endpoint} is 0"
                assert latency_rate[label] > 0, f"rate(attserve_request_duration_seconds_count) of {endpoint} is 0"
                assert math.isfinite(p95[label]) and 0 < p95[label] <= 30, f"p95 latency of {endpoint}: {p95[label]}"
                assert buckets[label] >= 2, f"{endpoint}: no histogram buckets"
                model = model_of[label]
                assert batch_rate.get(model, 0) > 0, f"rate(attserve_batch_size_count) of {model} ({endpoint}) is 0"
                # Every input the endpoint accepted went through a batch of its model.
                assert batch_items[model] == service.inputs[endpoint]

            # The Grafana dashboard's queries run on this Prometheus, and every panel has data
            # except the ones for failures this traffic does not cause.
            grafana = {"$__rate_interval": "30s", "$__range": "5m", "$model": ".*"}
            quiet = re.compile(r'status=~"429\|504"|attserve_dropped_items_total')
            for title, expr in dashboard_queries():
                if match := re.fullmatch(r"label_values\((\w+),\s*(\w+)\)", expr):
                    expr = f"group by ({match.group(2)}) ({match.group(1)})"
                for variable, value in grafana.items():
                    expr = expr.replace(variable, value)
                result = prometheus.query(expr)
                if not quiet.search(expr):
                    assert result, f"dashboard panel {title!r}: {expr} returns no data"
