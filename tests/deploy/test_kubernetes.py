"""The Kubernetes manifests (deploy/kubernetes) checked with real tools and against the real
service: every overlay rendered by kubectl's kustomize; the rendered objects and the KServe
InferenceService validated against the Kubernetes 1.37 JSON schemas (kubernetes-validate,
strict) and the ServiceMonitor against its CRD's schema (@kubernetes-models, Node.js); the
HPA's metric, the probes' paths and port, the security context and the grace period compared
with what the service, its image and docker-compose.yml actually do. No cluster is involved.
deploy/kubernetes/ci-deps.sh installs the tools; without them those tests skip with the reason.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from tests.bundles import running_app
from tests.deploy.test_deploy import exported_series_names, selected_metric_names

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "deploy" / "kubernetes"
TOOLS = K8S / ".tools"
OVERLAYS = sorted(p.name for p in (K8S / "overlays").iterdir() if (p / "kustomization.yaml").exists())
INFERENCE_SERVICE = K8S / "kserve" / "inferenceservice.yaml"
ADAPTER_VALUES = K8S / "prometheus-adapter" / "values.yaml"
KUBERNETES_VERSION = "1.37"
INSTALL_HINT = "run `bash deploy/kubernetes/ci-deps.sh` to install it"


# --- tools -----------------------------------------------------------------------------------

def kubectl() -> str:
    local = TOOLS / "bin" / "kubectl"
    path = str(local) if local.exists() else shutil.which("kubectl")
    if path is None:
        pytest.skip(f"kubectl (renders the kustomize overlays) is not installed; {INSTALL_HINT}")
    return path


def schema_validator() -> list[str]:
    python = TOOLS / "venv" / "bin" / "python"
    if not python.exists():
        pytest.skip(f"kubernetes-validate's venv is not installed; {INSTALL_HINT}")
    return [str(python), str(K8S / "ci" / "validate_manifests.py"), "--kubernetes-version", KUBERNETES_VERSION]


def crd_validator() -> list[str]:
    node = shutil.which("node")
    if node is None or not (K8S / "ci" / "node_modules" / "@kubernetes-models" / "prometheus-operator").exists():
        pytest.skip(f"Node.js or the CRD validators (@kubernetes-models/prometheus-operator) are not installed; {INSTALL_HINT}")
    return [node, str(K8S / "ci" / "validate-custom-resources.mjs")]


def render(directory: Path) -> list[dict]:
    result = subprocess.run([kubectl(), "kustomize", str(directory)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"kustomize failed for {directory}:\n{result.stderr}"
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[dict]]:
    return {overlay: render(K8S / "overlays" / overlay) for overlay in OVERLAYS}


def only(objects: list[dict], kind: str) -> dict:
    matches = [o for o in objects if o["kind"] == kind]
    assert len(matches) == 1, f"expected one {kind}, found {len(matches)}"
    return matches[0]


def inference_service() -> dict:
    return yaml.safe_load(INFERENCE_SERVICE.read_text())


def validate_schemas(objects: list[dict], tmp_path: Path) -> list[dict]:
    path = tmp_path / "objects.yaml"
    path.write_text(yaml.safe_dump_all(objects, sort_keys=False))
    result = subprocess.run([*schema_validator(), str(path)], capture_output=True, text=True, timeout=120)
    records = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    assert len(records) == len(objects), result.stderr
    assert result.returncode == (1 if any(r["status"] == "error" for r in records) else 0), result.stderr
    return records


def validate_custom_resources(objects: list[dict]) -> subprocess.CompletedProcess:
    return subprocess.run(crd_validator(), input=json.dumps(objects), capture_output=True, text=True,
                          timeout=60, cwd=K8S / "ci")


# --- render and validate ---------------------------------------------------------------------

def test_every_overlay_renders_the_whole_deployment(rendered):
    assert {"cpu", "gpu", "cpu-models-pvc"} <= set(OVERLAYS)
    for overlay, objects in rendered.items():
        kinds = sorted(o["kind"] for o in objects)
        expected = {"Deployment", "Service", "PodDisruptionBudget", "HorizontalPodAutoscaler", "ServiceMonitor"}
        if overlay.endswith("models-pvc"):
            expected.add("PersistentVolumeClaim")
        assert sorted(expected) == kinds, overlay
        assert {o["metadata"].get("namespace") for o in objects} == {"attserve"}, overlay


def test_without_servicemonitor_component_drops_only_the_servicemonitor(rendered, tmp_path):
    """An overlay of the user's own (here in a temporary directory) composing overlays/cpu with
    components/without-servicemonitor, as its kustomization.yaml comment shows."""
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [os.path.relpath(K8S / "overlays" / "cpu", tmp_path)],
        "components": [os.path.relpath(K8S / "components" / "without-servicemonitor", tmp_path)],
    }))
    objects = render(tmp_path)
    assert objects == [o for o in rendered["cpu"] if o["kind"] != "ServiceMonitor"]


def test_rendered_objects_and_inference_service_pass_the_kubernetes_schemas(rendered, tmp_path):
    objects = [o for objects in rendered.values() for o in objects] + [inference_service()]
    records = validate_schemas(objects, tmp_path)
    errors = [r for r in records if r["status"] != "ok" and r["kind"] != "ServiceMonitor"]
    assert not errors, errors
    # the ServiceMonitor has no Kubernetes schema: the CRD validator below covers it
    assert {r["status"] for r in records if r["kind"] == "ServiceMonitor"} == {"noschema"}


def test_schema_validation_catches_mistakes(rendered, tmp_path):
    """The validation above can fail: a misspelt probe field, a string replica count and a
    misspelt InferenceService container field are each reported."""
    deployment = json.loads(json.dumps(only(rendered["cpu"], "Deployment")))
    probe = deployment["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]
    probe["httpGet"]["pth"] = probe["httpGet"].pop("path")
    hpa = json.loads(json.dumps(only(rendered["cpu"], "HorizontalPodAutoscaler")))
    hpa["spec"]["minReplicas"] = "two"
    isvc = inference_service()
    isvc["spec"]["predictor"]["containers"][0]["imagePullPolicyy"] = "Always"
    records = validate_schemas([deployment, hpa, isvc], tmp_path)
    assert [r["status"] for r in records] == ["error", "error", "error"], records
    assert "pth" in records[0]["message"] and "minReplicas" in records[1]["message"]


def test_service_monitor_passes_its_crd_schema(rendered):
    monitors = [only(objects, "ServiceMonitor") for objects in rendered.values()]
    result = validate_custom_resources(monitors)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines() == ["ok ServiceMonitor/attserve"] * len(monitors)

    broken = json.loads(json.dumps(monitors[0]))
    broken["spec"]["endpoints"][0]["interval"] = "15 seconds"
    result = validate_custom_resources([broken])
    assert result.returncode == 1 and "interval" in result.stdout, result.stdout + result.stderr


# --- the HPA's metric against the service's /metrics -----------------------------------------

@pytest.fixture(scope="module")
def live_metrics(service_bundles) -> str:
    """/metrics of the real app (in-process, the test bundles), models loaded."""
    from service.settings import Settings

    async def scenario() -> str:
        settings = Settings(model_repository=service_bundles, device="cpu", intra_op_threads=1)
        async with running_app(settings) as (_, client):
            response = await client.get("/metrics")
            assert response.status_code == 200
            return response.text

    return asyncio.run(scenario())


def adapter_rules() -> list[dict]:
    return yaml.safe_load(ADAPTER_VALUES.read_text())["rules"]["custom"]


def test_hpa_metric_is_exported_by_the_service_under_the_same_name(rendered, live_metrics):
    from prometheus_client.parser import text_string_to_metric_families

    exported = exported_series_names(live_metrics)
    for overlay, objects in rendered.items():
        hpa = only(objects, "HorizontalPodAutoscaler")
        deployment = only(objects, "Deployment")
        assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment",
                                                 "name": deployment["metadata"]["name"]}
        [metric] = hpa["spec"]["metrics"]
        assert metric["type"] == "Pods", overlay
        hpa_name = metric["pods"]["metric"]["name"]
        assert hpa_name in exported, f"{overlay}: the HPA scales on {hpa_name}, which /metrics does not export"

        # prometheus-adapter publishes exactly that name, from exactly that series
        [rule] = [r for r in adapter_rules() if r["name"]["as"] == hpa_name]
        series = selected_metric_names(rule["seriesQuery"])
        assert series == {hpa_name}
        assert re.search(rule["name"]["matches"], hpa_name)
        query = (rule["metricsQuery"].replace("<<.Series>>", hpa_name)
                 .replace("<<.LabelMatchers>>", 'namespace="attserve"').replace("<<.GroupBy>>", "pod"))
        assert selected_metric_names(query) == {hpa_name}
        assert set(rule["resources"]["overrides"]) == {"namespace", "pod"}

    # a gauge with one series per served model (so the pod sum covers every queue)
    families = {f.name: f for f in text_string_to_metric_families(live_metrics)}
    family = families[hpa_name]
    assert family.type == "gauge"
    assert {s.labels["model"] for s in family.samples} == {"nli", "fever", "sentiment", "topic"}


def test_a_misspelt_hpa_metric_would_be_caught(live_metrics):
    assert "attserve_queue_size" not in exported_series_names(live_metrics)


def test_scrape_configuration_points_at_the_metrics_endpoint(rendered):
    for overlay, objects in rendered.items():
        service = only(objects, "Service")
        pod = only(objects, "Deployment")["spec"]["template"]
        container = pod["spec"]["containers"][0]
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        [endpoint] = only(objects, "ServiceMonitor")["spec"]["endpoints"]
        assert endpoint["path"] == "/metrics"
        assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
        [service_port] = [p for p in service["spec"]["ports"] if p["name"] == endpoint["port"]]
        assert ports[service_port["targetPort"]] == image_port(overlay)
        annotations = pod["metadata"]["annotations"]
        assert annotations["prometheus.io/path"] == "/metrics"
        assert int(annotations["prometheus.io/port"]) == image_port(overlay)
        # the ServiceMonitor and Service select what the Deployment runs
        labels = pod["metadata"]["labels"]
        selector = only(objects, "ServiceMonitor")["spec"]["selector"]["matchLabels"]
        assert selector.items() <= only(objects, "Service")["metadata"]["labels"].items()
        assert service["spec"]["selector"].items() <= labels.items()
        assert only(objects, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"].items() <= labels.items()


# --- probes, port, image ---------------------------------------------------------------------

def dockerfile_env(dockerfile: Path) -> dict[str, str]:
    """ENV KEY=VALUE pairs of a Dockerfile's last stage (continuation lines joined)."""
    text = dockerfile.read_text().replace("\\\n", " ")
    last_stage = re.split(r"^FROM ", text, flags=re.M)[-1]
    env: dict[str, str] = {}
    for line in last_stage.splitlines():
        if line.startswith("ENV "):
            env.update(re.findall(r"(\w+)=(\S+)", line))
    return env


def image_env(overlay: str) -> dict[str, str]:
    return dockerfile_env(REPO / "docker" / ("Dockerfile.gpu" if overlay.startswith("gpu") else "Dockerfile"))


def container_env(container: dict) -> dict[str, str]:
    """The plain values (not those taken from a Secret)."""
    return {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}


def image_port(overlay: str) -> int:
    return int(image_env(overlay)["ATTSERVE_PORT"])


def test_probes_use_the_services_health_endpoints_on_its_port(rendered, service_bundles):
    from service.settings import Settings

    probe_paths = set()
    for overlay, objects in rendered.items():
        container = only(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]
        env = {**image_env(overlay), **container_env(container)}
        # listening where the kubelet can reach it, on the port the probes name
        assert env["ATTSERVE_HOST"] == "0.0.0.0"
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert ports == {"http": int(env["ATTSERVE_PORT"])}
        assert container["readinessProbe"]["httpGet"]["path"] == "/health/ready"
        assert container["startupProbe"]["httpGet"]["path"] == "/health/ready"
        assert container["livenessProbe"]["httpGet"]["path"] == "/health/live"
        for kind in ("readinessProbe", "startupProbe", "livenessProbe"):
            get = container[kind]["httpGet"]
            assert ports[get["port"]] == int(env["ATTSERVE_PORT"]), (overlay, kind)
            probe_paths.add(get["path"])
        # the startup probe allows at least as long as compose's start period for the image
        startup = container["startupProbe"]
        assert startup["periodSeconds"] * startup["failureThreshold"] >= (120 if overlay.startswith("gpu") else 60)

    isvc_container = inference_service()["spec"]["predictor"]["containers"][0]
    assert isvc_container["ports"][0]["containerPort"] == image_port("cpu")
    assert isvc_container["readinessProbe"]["httpGet"] == {"path": "/health/ready", "port": image_port("cpu")}
    assert isvc_container["livenessProbe"]["httpGet"] == {"path": "/health/live", "port": image_port("cpu")}

    async def scenario() -> dict[str, int]:
        settings = Settings(model_repository=service_bundles, device="cpu", intra_op_threads=1)
        async with running_app(settings) as (_, client):
            return {path: (await client.get(path)).status_code for path in sorted(probe_paths)}

    assert asyncio.run(scenario()) == {"/health/live": 200, "/health/ready": 200}


def test_api_keys_come_from_an_optional_secret(rendered):
    """Every overlay and the KServe InferenceService take ATTSERVE_API_KEYS from the Secret
    attserve-api-keys, which may be absent (no keys); the probes' paths need no key."""
    from service.http.auth import HEALTH_PATHS

    containers = {overlay: only(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]
                  for overlay, objects in rendered.items()}
    containers["kserve"] = inference_service()["spec"]["predictor"]["containers"][0]
    for where, container in containers.items():
        (keys,) = [e for e in container["env"] if e["name"] == "ATTSERVE_API_KEYS"]
        assert keys["valueFrom"]["secretKeyRef"] == {"name": "attserve-api-keys", "key": "keys", "optional": True}, where
        # KServe's predictor has no startup probe (Knative waits on readiness)
        probes = ("readinessProbe", "livenessProbe") if where == "kserve" else ("startupProbe", "readinessProbe", "livenessProbe")
        for probe in probes:
            assert container[probe]["httpGet"]["path"] in HEALTH_PATHS, (where, probe)


def test_gpu_overlay_asks_for_one_gpu_and_the_gpu_image(rendered):
    gpu = only(rendered["gpu"], "Deployment")["spec"]["template"]["spec"]
    cpu = only(rendered["cpu"], "Deployment")["spec"]["template"]["spec"]
    [gpu_container], [cpu_container] = gpu["containers"], cpu["containers"]
    assert gpu_container["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert "nvidia.com/gpu" not in json.dumps(cpu_container["resources"])
    # the tags docker-compose.yml builds the two images under
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())["services"]
    assert gpu_container["image"] == compose["api-gpu"]["image"] == "attserve:gpu"
    assert cpu_container["image"] == compose["api"]["image"] == "attserve:cpu"
    assert {**image_env("gpu"), **container_env(gpu_container)}["ATTSERVE_DEVICE"] == "cuda"
    assert any(t["key"] == "nvidia.com/gpu" for t in gpu["tolerations"])


def test_models_pvc_variant_serves_the_mounted_repository(rendered):
    objects = rendered["cpu-models-pvc"]
    claim = only(objects, "PersistentVolumeClaim")
    pod = only(objects, "Deployment")["spec"]["template"]["spec"]
    [container] = pod["containers"]
    [volume] = [v for v in pod["volumes"] if "persistentVolumeClaim" in v]
    assert volume["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
    assert "ReadOnlyMany" in claim["spec"]["accessModes"]
    [mount] = [m for m in container["volumeMounts"] if m["name"] == volume["name"]]
    assert mount["readOnly"] is True
    repository = container_env(container)["ATTSERVE_MODEL_REPOSITORY"]
    assert repository.startswith(mount["mountPath"].rstrip("/") + "/")


# --- hardening and shutdown ------------------------------------------------------------------

def compose_hardening() -> dict:
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    return compose["services"]["api"]


def dockerfile_user(dockerfile: Path) -> tuple[int, int]:
    [user] = re.findall(r"^USER (\d+):(\d+)$", dockerfile.read_text(), flags=re.M)
    return int(user[0]), int(user[1])


def size_bytes(text: str) -> int:
    """'64m' (compose) or '64Mi' (Kubernetes) in bytes."""
    number, unit = re.fullmatch(r"(\d+)([kKmMgG]i?)?", text).groups()
    return int(number) * 1024 ** {"k": 1, "m": 2, "g": 3}[unit[0].lower()] if unit else int(number)


def assert_container_hardened(container: dict, pod_security: dict, volumes: list[dict], uid_gid: tuple[int, int]) -> None:
    api = compose_hardening()
    security = container["securityContext"]
    effective = {**pod_security, **security}
    assert (effective["runAsUser"], effective["runAsGroup"]) == uid_gid
    assert effective["runAsNonRoot"] is True
    assert effective["seccompProfile"] == {"type": "RuntimeDefault"}
    # compose: read_only, cap_drop [ALL], no-new-privileges
    assert api["read_only"] is True and security["readOnlyRootFilesystem"] is True
    assert api["cap_drop"] == ["ALL"] and security["capabilities"] == {"drop": ["ALL"]}
    assert "no-new-privileges:true" in api["security_opt"] and security["allowPrivilegeEscalation"] is False
    assert not security.get("privileged", False)
    # compose: tmpfs /tmp:size=64m -> a memory emptyDir of the same size at /tmp
    [tmpfs] = api["tmpfs"]
    path, options = tmpfs.split(":")
    compose_size = size_bytes(dict(o.split("=") for o in options.split(","))["size"])
    [mount] = [m for m in container["volumeMounts"] if m["mountPath"] == path]
    [volume] = [v for v in volumes if v["name"] == mount["name"]]
    assert volume["emptyDir"]["medium"] == "Memory"
    assert size_bytes(volume["emptyDir"]["sizeLimit"]) == compose_size


def test_security_context_matches_the_compose_hardening(rendered):
    for overlay, objects in rendered.items():
        pod = only(objects, "Deployment")["spec"]["template"]["spec"]
        dockerfile = REPO / "docker" / ("Dockerfile.gpu" if overlay.startswith("gpu") else "Dockerfile")
        assert_container_hardened(pod["containers"][0], pod["securityContext"], pod["volumes"], dockerfile_user(dockerfile))
        assert pod["automountServiceAccountToken"] is False
    predictor = inference_service()["spec"]["predictor"]
    assert_container_hardened(predictor["containers"][0], predictor.get("securityContext", {}), predictor["volumes"],
                              dockerfile_user(REPO / "docker" / "Dockerfile"))


def test_termination_grace_period_outlasts_the_pre_stop_pause_and_the_drain(rendered):
    from service.settings import Settings

    default_drain = Settings.model_fields["shutdown_timeout_s"].default
    for overlay, objects in rendered.items():
        pod = only(objects, "Deployment")["spec"]["template"]["spec"]
        [container] = pod["containers"]
        drain = float(container_env(container).get("ATTSERVE_SHUTDOWN_TIMEOUT_S", default_drain))
        pre_stop = container.get("lifecycle", {}).get("preStop", {}).get("sleep", {}).get("seconds", 0)
        assert pod["terminationGracePeriodSeconds"] > pre_stop + drain, overlay
        # the kubelet's SIGTERM comes after the pause: the drain must still fit the grace period
        assert pre_stop > 0, f"{overlay}: no pause for endpoint removal before SIGTERM"


def test_rollout_and_disruptions_keep_a_ready_replica(rendered):
    for overlay, objects in rendered.items():
        deployment = only(objects, "Deployment")
        hpa = only(objects, "HorizontalPodAutoscaler")
        pdb = only(objects, "PodDisruptionBudget")
        rolling = deployment["spec"]["strategy"]["rollingUpdate"]
        assert rolling["maxUnavailable"] == 0 and rolling["maxSurge"] >= 1, overlay
        # the HPA owns the replica count: an `apply` must not reset it
        assert "replicas" not in deployment["spec"]
        assert hpa["spec"]["minReplicas"] >= 2 and pdb["spec"]["maxUnavailable"] == 1
        resources = deployment["spec"]["template"]["spec"]["containers"][0]["resources"]
        assert size_bytes(resources["limits"]["memory"]) >= size_bytes(resources["requests"]["memory"])
