"""Deployment files checked with the real tools: Compose v2 `config` on docker-compose.yml
(default and `gpu` profile), hadolint on both Dockerfiles, promtool on the Prometheus config,
and every PromQL expression of the Grafana dashboard against the live `/metrics` of the real
service. No Docker engine is needed (none runs here); docker/ci-deps.sh installs the tools,
and each test skips with the reason when its tool is absent."""

from __future__ import annotations

import copy
import fnmatch
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import httpx
import pytest
import yaml
from tests.process.test_prometheus_e2e import dashboard_queries, running_service, send_traffic

REPO = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO / "docker-compose.yml"
DOCKERFILES = (REPO / "docker" / "Dockerfile", REPO / "docker" / "Dockerfile.gpu")
PROMETHEUS_CONFIG = REPO / "docker" / "prometheus" / "prometheus.yml"
GRAFANA = REPO / "docker" / "grafana"
DASHBOARD = GRAFANA / "dashboards" / "attserve.json"
INSTALL_HINT = "run docker/ci-deps.sh as root to install it"

# The service's metric families (the fixed contract in the design notes).
CONTRACT_METRICS = {
    "attserve_requests_total",
    "attserve_request_duration_seconds",
    "attserve_queue_wait_seconds",
    "attserve_inference_duration_seconds",
    "attserve_batch_size",
    "attserve_batch_tokens",
    "attserve_queue_depth",
    "attserve_model_info",
    "attserve_truncated_inputs_total",
    "attserve_inputs_total",
}
# Series Prometheus makes itself for every scrape target; the service does not export them.
PROMETHEUS_SYNTHETIC = {"up"}
# Grafana's variables, replaced by values of the same PromQL type before parsing.
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$__interval": "15s", "$__range": "1h", "$model": ".*"}


# --- tools -----------------------------------------------------------------------------------

def compose_binary() -> str:
    """Compose v2 (Go). Debian's `docker-compose` is v1 (Python, end-of-life): skip on it too."""
    path = shutil.which("docker-compose")
    if path is None:
        pytest.skip(f"Compose v2 (`docker-compose`) is not installed; {INSTALL_HINT}")
    version = subprocess.run([path, "version", "--short"], capture_output=True, text=True, timeout=30).stdout.strip()
    if not version.lstrip("v").startswith("2."):
        pytest.skip(f"`{path}` is Compose {version or '?'}, not v2; {INSTALL_HINT}")
    return path


def tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"`{name}` is not installed; {INSTALL_HINT}")
    return path


def compose_env() -> dict[str, str]:
    """The caller's environment without ATTSERVE_*/port overrides, so `config` shows the file's
    own values whatever the developer has exported."""
    keep = {k: v for k, v in os.environ.items()
            if not k.startswith(("ATTSERVE_", "COMPOSE_", "PROMETHEUS_", "GRAFANA_", "BIND_ADDRESS"))}
    return {**keep, "GRAFANA_ADMIN_PASSWORD": "test-only-password"}


def compose_config(compose_file: Path, *profiles: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    args = [compose_binary(), "--project-directory", str(REPO), "-f", str(compose_file)]
    for profile in profiles:
        args += ["--profile", profile]
    return subprocess.run(args + ["config", "--format", "json"], capture_output=True, text=True, timeout=60,
                          cwd=REPO, env=compose_env() if env is None else env)


def resolved_compose(*profiles: str) -> dict:
    result = compose_config(COMPOSE_FILE, *profiles)
    assert result.returncode == 0, f"docker-compose config failed:\n{result.stderr}"
    return json.loads(result.stdout)


# --- docker-compose.yml ----------------------------------------------------------------------

def test_compose_file_is_valid_and_wires_the_stack():
    config = resolved_compose()
    services = config["services"]
    assert set(services) == {"api", "proxy", "prometheus", "grafana", "jaeger"}, \
        "the gpu service must stay behind its profile"

    api = services["api"]
    assert api["build"]["dockerfile"] == "docker/Dockerfile"
    assert Path(api["build"]["context"]) == REPO
    assert api["restart"] == "unless-stopped"
    assert any("/health/ready" in part for part in api["healthcheck"]["test"])
    # Replicas publish nothing (scaling needs no host ports); clients go through the proxy.
    assert not api.get("ports"), api.get("ports")
    # The drain must finish before compose sends SIGKILL.
    grace = api["stop_grace_period"]
    assert float(api["environment"]["ATTSERVE_SHUTDOWN_TIMEOUT_S"]) < _seconds(grace)

    prometheus = services["prometheus"]
    assert prometheus["depends_on"]["api"]["condition"] == "service_healthy"
    assert _bind_sources(prometheus)["/etc/prometheus/prometheus.yml"] == PROMETHEUS_CONFIG
    assert "healthcheck" in prometheus

    grafana = services["grafana"]
    assert grafana["depends_on"]["prometheus"]["condition"] == "service_healthy"
    mounts = _bind_sources(grafana)
    assert mounts["/etc/grafana/provisioning"] == GRAFANA / "provisioning"
    dashboards_dir = mounts["/var/lib/grafana/dashboards"]
    assert dashboards_dir == DASHBOARD.parent
    home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert dashboards_dir / Path(home).relative_to("/var/lib/grafana/dashboards") == DASHBOARD
    assert grafana["environment"]["GF_AUTH_ANONYMOUS_ENABLED"] == "false"
    assert grafana["environment"]["GF_LOG_MODE"] == "console"  # its root is read-only: no log files
    assert grafana["environment"]["GF_SECURITY_ADMIN_PASSWORD"] == "test-only-password"
    for mounted in mounts.values():
        assert mounted.exists(), f"{mounted} is mounted but missing"

    # the api's traces go to the trace backend's OTLP/HTTP port on the compose network (docs/tracing.md)
    jaeger = services["jaeger"]
    assert api["environment"]["ATTSERVE_OTLP_ENDPOINT"] == "http://jaeger:4318"
    assert "4318" in jaeger["expose"] and jaeger["environment"]["COLLECTOR_OTLP_ENABLED"] == "true"
    assert [port["target"] for port in jaeger["ports"]] == [16686]  # the UI only, on the host


def test_compose_stack_is_locked_down():
    """Localhost-only ports unless opted in, read-only containers without
    capabilities or privilege gain, memory limits, and the proxy in front of the replicas."""
    services = resolved_compose("gpu")["services"]
    for name, service in services.items():
        assert service.get("read_only") is True, name
        assert service.get("cap_drop") == ["ALL"], name
        assert "no-new-privileges:true" in service.get("security_opt", []), name
        assert service.get("mem_limit"), name
        for port in service.get("ports", []):
            assert port["host_ip"] == "127.0.0.1", (name, port)
    published = {name for name, service in services.items() if service.get("ports")}
    assert published == {"proxy", "prometheus", "grafana", "jaeger"}
    proxy = services["proxy"]
    assert proxy["depends_on"]["api"]["condition"] == "service_healthy"
    assert _bind_sources(proxy)["/etc/nginx/nginx.conf"] == REPO / "docker" / "nginx" / "nginx.conf"
    conf = (REPO / "docker" / "nginx" / "nginx.conf").read_text()
    for directive in ("server api:8000 resolve", "client_header_timeout", "client_body_timeout",
                      "client_max_body_size 1m", "limit_conn per_client", "limit_conn_status 429",
                      "proxy_read_timeout", "large_client_header_buffers"):
        assert directive in conf, directive
    opted_in = compose_config(COMPOSE_FILE, env={**compose_env(), "BIND_ADDRESS": "0.0.0.0"})
    assert opted_in.returncode == 0, opted_in.stderr
    ports = json.loads(opted_in.stdout)["services"]["proxy"]["ports"]
    assert ports[0]["host_ip"] == "0.0.0.0"


def test_compose_passes_the_api_keys_from_an_env_file(tmp_path):
    """ATTSERVE_API_KEYS (or a mounted secret named in ATTSERVE_API_KEYS_FILE) reaches
    every replica from the shell or an .env file; unset, the replicas ask for no key."""
    without = resolved_compose("gpu")["services"]
    assert all(without[name]["environment"].get("ATTSERVE_API_KEYS") is None for name in ("api", "api-gpu"))
    env_file = tmp_path / "attserve.env"
    env_file.write_text("ATTSERVE_API_KEYS=key-from-the-env-file-0123\n")
    result = subprocess.run([compose_binary(), "--project-directory", str(REPO), "-f", str(COMPOSE_FILE),
                             "--env-file", str(env_file), "--profile", "gpu", "config", "--format", "json"],
                            capture_output=True, text=True, timeout=60, cwd=REPO, env=compose_env())
    assert result.returncode == 0, result.stderr
    services = json.loads(result.stdout)["services"]
    for name in ("api", "api-gpu"):
        assert services[name]["environment"]["ATTSERVE_API_KEYS"] == "key-from-the-env-file-0123"
    # the healthcheck probes a route that needs no key
    from service.http.auth import HEALTH_PATHS

    assert any(path in " ".join(services["api"]["healthcheck"]["test"]) for path in HEALTH_PATHS)


def test_the_proxy_keeps_metrics_and_foreign_hosts_out():
    """nginx does not publish /metrics (Prometheus scrapes the replicas directly), and
    the replicas answer only the host names of the localhost-only published port."""
    conf = (REPO / "docker" / "nginx" / "nginx.conf").read_text()
    block = re.search(r"location = /metrics \{(.*?)\}", conf, re.S)
    assert block and "return 404" in block.group(1) and "proxy_pass" not in block.group(1)
    assert "proxy_set_header Host $host;" in conf  # what the allow-list sees is the client's Host
    for name in ("api", "api-gpu"):
        hosts = resolved_compose("gpu")["services"][name]["environment"]["ATTSERVE_ALLOWED_HOSTS"]
        assert set(hosts.split(",")) == {"localhost", "127.0.0.1", "[::1]"}


def test_compose_refuses_to_start_without_a_grafana_password():
    env = {k: v for k, v in compose_env().items() if k != "GRAFANA_ADMIN_PASSWORD"}
    result = compose_config(COMPOSE_FILE, env=env)
    assert result.returncode != 0 and "GRAFANA_ADMIN_PASSWORD" in result.stderr


@pytest.mark.parametrize("lock", ["requirements.lock", "requirements-gpu.lock"])
def test_images_install_dependencies_from_a_hashed_lock(lock):
    """Every pinned requirement of the lock carries a sha256, and the Dockerfile installs from it
    with --require-hashes; the GPU lock pins an onnxruntime-gpu that ORT_GPU_SPEC admits."""
    from packaging.specifiers import SpecifierSet

    text = (REPO / "docker" / lock).read_text()
    requirement_lines = [line for line in text.splitlines() if line[:1].isalnum()]
    pinned = re.findall(r"^([A-Za-z0-9][\w.\-]*)==([^\s\\]+)((?:\s*\\\n\s+--hash=sha256:[0-9a-f]{64})+)", text, re.M)
    assert requirement_lines and len(pinned) == len(requirement_lines), "a requirement without == or hashes"
    pins = {name: version for name, version, _ in pinned}
    assert {"fastapi", "uvicorn", "tokenizers", "numpy", "setuptools"} <= set(pins)
    dockerfile = "Dockerfile" if lock == "requirements.lock" else "Dockerfile.gpu"
    source = (REPO / "docker" / dockerfile).read_text()
    assert f"--require-hashes -r docker/{lock}" in source
    assert "--no-deps --no-build-isolation ." in source
    if lock == "requirements-gpu.lock":
        assert "onnxruntime" not in pins
        args = dict(a.split("=", 1) for k, a in dockerfile_instructions(REPO / "docker" / dockerfile)
                    if k == "ARG" and "=" in a)
        assert pins["onnxruntime-gpu"] in SpecifierSet(args["ORT_GPU_SPEC"].strip('"').removeprefix("onnxruntime-gpu"))
    else:
        assert "onnxruntime" in pins


def test_compose_gpu_profile_reserves_a_gpu():
    services = resolved_compose("gpu")["services"]
    assert set(services) == {"api", "api-gpu", "proxy", "prometheus", "grafana", "jaeger"}
    gpu = services["api-gpu"]
    assert gpu["build"]["dockerfile"] == "docker/Dockerfile.gpu"
    assert gpu["environment"]["ATTSERVE_DEVICE"] == "cuda"
    (device,) = gpu["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia"
    assert device["capabilities"] == ["gpu"]
    assert device.get("count") in (1, "all") or device.get("device_ids")
    # Scraped with the CPU replicas: Prometheus discovers the `api` name.
    assert "api" in gpu["networks"]["default"]["aliases"]


def test_compose_config_rejects_a_broken_file(tmp_path):
    """The validator is real: the same file with one misspelt key or a device reservation
    without capabilities does not pass."""
    original = yaml.safe_load(COMPOSE_FILE.read_text())
    unchanged = tmp_path / "unchanged.yml"
    unchanged.write_text(yaml.safe_dump(original, sort_keys=False))
    assert compose_config(unchanged, "gpu").returncode == 0, "the round-tripped file itself must pass"
    typo = copy.deepcopy(original)
    typo["services"]["api"]["healthchek"] = typo["services"]["api"].pop("healthcheck")
    no_capabilities = copy.deepcopy(original)
    del no_capabilities["services"]["api-gpu"]["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"]
    for name, broken in (("typo", typo), ("no-capabilities", no_capabilities)):
        path = tmp_path / f"{name}.yml"
        path.write_text(yaml.safe_dump(broken, sort_keys=False))
        result = compose_config(path, "gpu")
        assert result.returncode != 0, f"{name}: compose accepted an invalid file"
        assert "validating" in result.stderr, result.stderr


def _bind_sources(service: dict) -> dict[str, Path]:
    return {v["target"]: Path(v["source"]) for v in service.get("volumes", []) if v["type"] == "bind"}


def _seconds(duration: str) -> float:
    units = {"h": 3600, "m": 60, "s": 1, "ms": 0.001}
    total = 0.0
    for value, unit in re.findall(r"(\d+(?:\.\d+)?)(ms|h|m|s)", duration):
        total += float(value) * units[unit]
    return total


# --- Dockerfiles -----------------------------------------------------------------------------

def hadolint(path: Path, workdir: Path) -> tuple[int, list[dict]]:
    """hadolint's exit status and findings, failing on every level (error, warning, info,
    style) and with a config that ignores nothing, so neither a developer's
    ~/.config/hadolint.yaml nor a HADOLINT_* variable can hide a finding. The only way to
    accept one is an inline `# hadolint ignore=` in the Dockerfile, with its reason above it."""
    config = workdir / "hadolint.yaml"
    config.write_text("ignored: []\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("HADOLINT_")}
    result = subprocess.run([tool("hadolint"), "--config", str(config), "--failure-threshold", "info",
                             "--format", "json", str(path)], capture_output=True, text=True, timeout=60, env=env)
    assert result.stdout.strip(), result.stderr
    return result.returncode, json.loads(result.stdout)


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_dockerfile_passes_hadolint(dockerfile, tmp_path):
    returncode, findings = hadolint(dockerfile, tmp_path)
    listed = [f"{f['line']}: {f['code']} ({f['level']}) {f['message']}" for f in findings]
    assert returncode == 0 and not findings, "hadolint findings:\n" + "\n".join(listed)


def test_hadolint_fails_on_warnings_and_infos(tmp_path):
    """The check above has teeth: a Dockerfile with only warning- and info-level findings (no
    errors, which is what the old error-only check with --no-fail let through) fails."""
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:3.12-slim\nRUN apt-get update && apt-get install -y curl\nRUN cd /tmp && ls\n")
    returncode, findings = hadolint(bad, tmp_path)
    assert returncode != 0
    assert {f["level"] for f in findings} == {"warning", "info"}, findings
    assert {"DL3008", "DL3003", "DL3015"} <= {f["code"] for f in findings}, findings


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_hadolint_ignores_give_their_reason(dockerfile):
    """Each inline `# hadolint ignore=` sits under a comment saying why (a bare ignore is how a
    finding gets silenced without review)."""
    lines = dockerfile.read_text().splitlines()
    for number, line in enumerate(lines):
        if re.match(r"\s*#\s*hadolint\s+ignore=", line):
            above = lines[number - 1].strip() if number else ""
            assert above.startswith("#") and "hadolint" not in above and len(above) > 10, (
                f"{dockerfile.name}:{number + 1}: `{line.strip()}` without a reason on the line above")


def dockerfile_instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for line in path.read_text().splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        pending += " " + stripped.removesuffix("\\")
        if not stripped.endswith("\\"):
            keyword, _, rest = pending.strip().partition(" ")
            out.append((keyword.upper(), rest.strip()))
            pending = ""
    return out


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_dockerfile_runtime_contract(dockerfile):
    instructions = dockerfile_instructions(dockerfile)
    stages = [args for keyword, args in instructions if keyword == "FROM"]
    assert len(stages) >= 2, "multi-stage build expected"
    runtime_start = max(i for i, (keyword, _) in enumerate(instructions) if keyword == "FROM")
    runtime = instructions[runtime_start:]
    last = {keyword: args for keyword, args in runtime}

    assert json.loads(last["CMD"]) == ["python", "-m", "service"], "exec-form CMD, so SIGTERM reaches the server"
    assert last["STOPSIGNAL"] == "SIGTERM"
    assert last["EXPOSE"] == "8000"
    user = last["USER"].split(":")[0]
    assert user not in ("root", "0"), "the runtime stage must not run as root"
    assert "/health/ready" in last["HEALTHCHECK"] and "CMD [" in last["HEALTHCHECK"]
    env = " ".join(args for keyword, args in runtime if keyword == "ENV")
    assert "ATTSERVE_HOST=0.0.0.0" in env and "ATTSERVE_MODEL_REPOSITORY=/app/model_repository" in env
    assert "ATTSERVE_DEVICE=" + ("cuda" if dockerfile.name.endswith(".gpu") else "cpu") in env
    assert any(k == "LABEL" and "org.opencontainers.image.title" in a for k, a in runtime)
    # Base images pinned by tag (never implicit :latest).
    args = dict(a.split("=", 1) for k, a in instructions if k == "ARG" and "=" in a)
    for base in stages:
        image = base.split()[0]
        image = args.get(image.strip("${}"), image) if image.startswith("$") else image
        if image == "builder":
            continue
        assert ":" in image and not image.endswith(":latest"), f"unpinned base image {image}"


# CUDA major each onnxruntime-gpu PyPI wheel links (readelf -d on its
# libonnxruntime_providers_cuda.so: libcublas.so.12 vs libcublas.so.13).
ORT_GPU_WHEEL_CUDA = {"1.20.0": 12, "1.26.0": 12, "1.31.1": 13}


def test_gpu_image_takes_onnxruntime_built_for_its_cuda():
    from packaging.specifiers import SpecifierSet

    instructions = dockerfile_instructions(REPO / "docker" / "Dockerfile.gpu")
    args = dict(a.split("=", 1) for k, a in instructions if k == "ARG" and "=" in a)
    cuda_major = int(re.fullmatch(r"nvidia/cuda:(\d+)\..*", args["CUDA_IMAGE"]).group(1))
    requirement = args["ORT_GPU_SPEC"].strip('"')
    assert requirement.startswith("onnxruntime-gpu")
    spec = SpecifierSet(requirement.removeprefix("onnxruntime-gpu"))
    admitted = {v: major for v, major in ORT_GPU_WHEEL_CUDA.items() if v in spec}
    assert admitted, f"{requirement} admits none of the known wheels"
    wrong = {v: major for v, major in admitted.items() if major != cuda_major}
    assert not wrong, f"{requirement} admits wheels built for another CUDA than the image's {cuda_major}: {wrong}"


def _dockerignore_excludes(relative: str, patterns: list[str]) -> bool:
    """Docker's rule: the last matching pattern wins; `!` re-includes; a directory match
    covers everything under it."""
    parts = relative.strip("/").split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    excluded = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        pattern = pattern.lstrip("!").strip("/")
        if any(fnmatch.fnmatchcase(p, pattern) or fnmatch.fnmatchcase(p, pattern.replace("**/", "")) for p in prefixes):
            excluded = not negate
    return excluded


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_dockerfile_copies_only_what_the_context_holds(dockerfile):
    """Every `COPY` source exists in the repository and is not dropped by .dockerignore
    (a missing one fails `docker build` at that step)."""
    patterns = [
        line.strip() for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]
    sources: list[str] = []
    for keyword, args in dockerfile_instructions(dockerfile):
        if keyword == "COPY" and "--from=" not in args:
            words = [w for w in args.split() if not w.startswith("--")]
            sources += words[:-1]
    assert sources
    for source in sources:
        assert (REPO / source).exists(), f"{dockerfile.name} copies {source}, which the repository lacks"
        assert not _dockerignore_excludes(source, patterns), f".dockerignore drops {source}"
    for private in (".git", ".venv", "runs", "data_cache", "tests"):
        assert _dockerignore_excludes(private, patterns), f".dockerignore lets {private} into the context"


# --- Prometheus and Grafana configs ----------------------------------------------------------

def test_prometheus_config_discovers_every_api_replica():
    result = subprocess.run([tool("promtool"), "check", "config", str(PROMETHEUS_CONFIG)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    (job,) = [j for j in yaml.safe_load(PROMETHEUS_CONFIG.read_text())["scrape_configs"] if j["job_name"] == "attserve"]
    assert job["metrics_path"] == "/metrics"
    (sd,) = job["dns_sd_configs"]
    assert sd["names"] == ["api"] and sd["type"] == "A" and sd["port"] == 8000


def test_grafana_provisioning_points_at_the_dashboard_and_datasource():
    (datasource,) = yaml.safe_load((GRAFANA / "provisioning" / "datasources" / "prometheus.yml").read_text())["datasources"]
    assert datasource["type"] == "prometheus" and datasource["url"] == "http://prometheus:9090"
    (provider,) = yaml.safe_load((GRAFANA / "provisioning" / "dashboards" / "attserve.yml").read_text())["providers"]
    assert provider["options"]["path"] == "/var/lib/grafana/dashboards"
    dashboard = json.loads(DASHBOARD.read_text())
    uids = {target["datasource"]["uid"] for panel in dashboard["panels"] for target in panel["targets"]}
    assert uids == {datasource["uid"]}


# --- the dashboard against the service's real metrics -----------------------------------------

def selected_metric_names(expr: str) -> set[str]:
    """Metric names of every selector in a PromQL expression (Grafana variables substituted),
    parsed with a real PromQL parser; `label_values(metric, label)` is Grafana's own syntax."""
    promql_parser = pytest.importorskip("promql_parser", reason="promql-parser (a [dev] dependency) is not installed")
    if match := re.fullmatch(r"label_values\((\w+),\s*\w+\)", expr):
        return {match.group(1)}
    for variable, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(variable, value)
    names: set[str] = set()

    def visit(node):
        if isinstance(node, promql_parser.VectorSelector):
            assert node.name, f"selector without a metric name in {expr!r}"
            names.add(node.name)

    promql_parser.walk(promql_parser.parse(expr), visit)
    return names


def exported_series_names(metrics_text: str) -> set[str]:
    """Series names in a `/metrics` text: the samples present, plus the names each declared
    family produces once it has a sample (a labelled counter that never moved has no sample
    yet but is exported all the same)."""
    from prometheus_client.parser import text_string_to_metric_families

    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "summary": ("", "_sum", "_count"),
                "gauge": ("",), "info": ("_info",)}
    names: set[str] = set()
    for family in text_string_to_metric_families(metrics_text):
        names |= {sample.name for sample in family.samples}
        names |= {family.name + suffix for suffix in suffixes.get(family.type, ("",))}
    return names


def test_dashboard_queries_name_only_exported_metrics(live_metrics_text):
    exported = exported_series_names(live_metrics_text)
    absent = {m for m in CONTRACT_METRICS if m not in exported and f"{m}_count" not in exported}
    assert not absent, f"/metrics lacks the contract metrics {sorted(absent)}"

    dashboard = json.loads(DASHBOARD.read_text())
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    used: set[str] = set()
    for _, expr in dashboard_queries():
        names = selected_metric_names(expr)
        unknown = names - exported - PROMETHEUS_SYNTHETIC
        assert not unknown, f"{expr!r} names {sorted(unknown)}, which /metrics does not export"
        used |= names
    families_used = {re.sub(r"_(bucket|sum|count)$", "", n) for n in used}
    missing = {m for m in CONTRACT_METRICS if m not in families_used}
    assert not missing, f"the dashboard shows nothing of {sorted(missing)}"


def test_dashboard_rejects_an_unknown_metric_name(live_metrics_text):
    """The check above can fail: a misspelt metric is caught."""
    exported = exported_series_names(live_metrics_text)
    names = selected_metric_names('sum(rate(attserve_request_total{model=~"$model"}[$__rate_interval]))')
    assert names == {"attserve_request_total"} and not names <= exported


@pytest.fixture(scope="module")
def live_metrics_text(service_bundles, tmp_path_factory):
    """`/metrics` of the real service (subprocess, tiny bundles) after one request of every
    kind, so every labelled histogram and counter has a series."""
    with running_service(service_bundles, tmp_path_factory.mktemp("metrics")) as service:
        send_traffic(service, rounds=1)
        return httpx.get(f"{service.url}/metrics", timeout=10).text
