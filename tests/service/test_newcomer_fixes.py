"""Issue 61.9 / 65: the root index lists every route, /metrics carries process metrics and no
`_created` series, Triton's model-config endpoint, /tokenize renders large answers off the
event loop, and the hints that name pip name the venv's."""

from __future__ import annotations

import asyncio

import pytest

from service.settings import Settings
from tests.bundles import metric_samples, running_app


def get_all(settings: Settings, paths: list[str]) -> list:
    async def scenario():
        async with running_app(settings) as (_, client):
            return [await client.get(path) for path in paths]
    return asyncio.run(scenario())


def test_the_root_index_lists_every_public_route(service_bundles):
    """Every operation of the OpenAPI schema, /tokenize and the /v2 protocol among them, is in
    the index with its description (the index is derived from the routes, not kept by hand)."""
    spec, index = get_all(Settings(model_repository=service_bundles), ["/openapi.json", "/"])
    listed = index.json()["endpoints"]
    operations = [f"{method.upper()} {path}" for path, ops in spec.json()["paths"].items() for method in ops]
    assert "POST /tokenize" in operations and any(" /v2/" in o for o in operations)
    missing = [o for o in operations if o not in listed]
    assert not missing, missing
    assert "GET /ui" in listed
    assert all(listed[o] for o in operations), {o: listed[o] for o in operations if not listed[o]}


def test_metrics_have_process_metrics_and_no_created_series(service_bundles):
    (text,) = [r.text for r in get_all(Settings(model_repository=service_bundles), ["/metrics"])]
    assert "_created" not in text
    assert metric_samples(text, "process_resident_memory_bytes")[()] > 1e6
    assert metric_samples(text, "process_cpu_seconds_total")[()] > 0
    assert metric_samples(text, "process_open_fds")[()] > 0


WORKER = """
import os, sys
from service.metrics import Metrics, render
metrics = Metrics()
if sys.argv[1] == "render":
    sys.stdout.write(render(metrics).decode())
print("pid", os.getpid())
"""


def test_process_metrics_with_workers_are_one_series_per_live_worker(tmp_path):
    """In multiprocess mode (ATTSERVE_WORKERS > 1) each worker's process metrics carry its pid,
    and a worker marked dead (as the supervisor does) drops out."""
    import os
    import subprocess
    import sys

    from prometheus_client import multiprocess

    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}

    def worker(mode: str) -> tuple[str, str]:
        out = subprocess.run([sys.executable, "-c", WORKER, mode], env=env, capture_output=True, text=True,
                             check=True, timeout=120).stdout
        return out.rsplit("pid ", 1)[1].strip(), out

    first, _ = worker("quiet")
    second, text = worker("render")
    memory = metric_samples(text, "process_resident_memory_bytes")
    assert set(memory) == {(("pid", first),), (("pid", second),)} and min(memory.values()) > 1e6
    assert metric_samples(text, "process_cpu_seconds_total")[(("pid", second),)] > 0
    multiprocess.mark_process_dead(int(first), str(tmp_path))
    _, text = worker("render")
    assert (("pid", first),) not in metric_samples(text, "process_resident_memory_bytes")


def test_triton_model_config_maps_the_metadata(service_bundles):
    """GET /v2/models/NAME/config (and its versioned form): Triton's model-config JSON, with the
    metadata's tensors less their batch dimension, Triton's data types and the request limit as
    max_batch_size; an unknown model is the protocol's 404."""
    settings = Settings(model_repository=service_bundles, max_inputs_per_request=48, max_batch_delay_ms=2)
    answers = get_all(settings, ["/v2/models/fever", "/v2/models/fever/config", "/v2/models/nli",
                                 "/v2/models/nli/config", "/v2/models/nope/config"])
    (fever_meta, fever, nli_meta, nli, unknown) = answers
    assert [a.status_code for a in answers] == [200, 200, 200, 200, 404]
    assert "nope" in unknown.json()["error"]
    triton_type = {"BYTES": "TYPE_STRING", "FP32": "TYPE_FP32", "BOOL": "TYPE_BOOL"}
    for meta, config in ((fever_meta.json(), fever.json()), (nli_meta.json(), nli.json())):
        assert config["name"] == meta["name"] and config["platform"] == "onnxruntime_onnx"
        assert config["max_batch_size"] == 48
        assert config["dynamic_batching"]["max_queue_delay_microseconds"] == 2000
        assert config["version_policy"] == {"specific": {"versions": meta["versions"]}}
        for side, tensors in (("input", meta["inputs"]), ("output", meta["outputs"])):
            assert [t["name"] for t in config[side]] == [t["name"] for t in tensors]
            for tensor, configured in zip(tensors, config[side]):
                assert configured["data_type"] == triton_type[tensor["datatype"]]
                assert configured["dims"] == (tensor["shape"][1:] or [1])
    scores = next(t for t in nli.json()["output"] if t["name"] == "scores")
    assert scores["dims"] == [len(nli_meta.json()["parameters"]["labels"])]
    evidence = next(t for t in fever.json()["input"] if t["name"] == "evidence")
    assert evidence["dims"] == [-1]
    version = nli_meta.json()["versions"][0]
    (versioned, wrong) = get_all(settings, [f"/v2/models/nli/versions/{version}/config", "/v2/models/nli/versions/x9/config"])
    assert versioned.json() == nli.json() and wrong.status_code == 404


def test_tokenize_writes_its_answer_off_the_event_loop(service_bundles, monkeypatch):
    """/tokenize's answer (5.9 MB for many long texts) is written in a worker thread, not on
    the event loop's: the render is replaced by one that records its thread."""
    import threading

    from service.http import tokenize

    threads = []
    real = tokenize.ANSWER_JSON

    class Recording:
        def dump_json(self, document):
            threads.append(threading.get_ident())
            return real.dump_json(document)

    monkeypatch.setattr(tokenize, "ANSWER_JSON", Recording())

    async def scenario():
        async with running_app(Settings(model_repository=service_bundles)) as (_, client):
            loop_thread = threading.get_ident()
            answer = await client.post("/tokenize", json={"inputs": [{"premise": "a man plays", "hypothesis": "music"}],
                                                          "model": "nli"})
            return loop_thread, answer
    loop_thread, answer = asyncio.run(scenario())
    assert answer.status_code == 200, answer.text
    assert answer.json()["results"][0]["fields"]["premise"]["count"] == 3
    assert threads and loop_thread not in threads


def test_missing_extras_name_the_running_interpreters_pip(monkeypatch, tmp_path):
    """A message that asks for an extra names `<this python> -m pip` (a bare `pip` may be the
    system's, not the venv's): tracing's and `attserve score`'s (the training commands':
    tests/process/test_cli_guards.py)."""
    import importlib.util
    import shlex
    import sys

    from typer.testing import CliRunner

    from cli.main import app
    from service.tracing import Tracing

    pip = f"{shlex.quote(sys.executable)} -m pip install -e '.["
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.http.trace_exporter", None)
    with pytest.raises(RuntimeError) as refused:
        Tracing.from_settings(Settings(otlp_endpoint="http://127.0.0.1:4318"))
    assert pip + "tracing]'" in str(refused.value)

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "pyarrow" else find_spec(name, *a))
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"text": "a"}\n')
    result = CliRunner().invoke(app, ["score", str(rows), "-o", str(tmp_path / "out.jsonl"), "--model", "bbc-act"])
    assert result.exit_code == 2
    assert pip + "score]'" in result.output, result.output


def test_warm_up_runs_each_batch_shape_twice_at_most(service_bundles):
    """The call-overhead measurement takes a batch's warm-up run as one of its best-of-2
    timings instead of running every large batch twice more (two thirds of the warm-up, the
    bulk of the start-up): each batch shape runs twice, the smallest item five times more."""
    from collections import Counter

    from service.inference.runtime import ModelRuntime, requested_providers

    runtime = ModelRuntime.load(service_bundles / "topic", requested_providers("cpu"), 1, {})
    runtime.use_batch_grid(None)
    shapes = runtime.warmup_shapes(32, 1 << 14)
    calls: Counter = Counter()
    run_call = runtime.run_call

    def counted(items):
        calls[(len(items), items[0].shape)] += 1
        return run_call(items)

    runtime.run_call = counted
    runtime.warmup(32, 1 << 14)
    batches = {(size, item.shape) for size, item in shapes if size > 1}
    assert batches and all(calls[b] == 2 for b in batches), calls
    assert runtime.call_overhead_tokens > 0


@pytest.mark.parametrize("providers, cpus, expected", [(["CPUExecutionProvider"], 4, 4), (["CPUExecutionProvider"], 2, 2),
                                                       (["CUDAExecutionProvider", "CPUExecutionProvider"], 4, 1)])
def test_start_up_loads_as_many_models_at_once_as_the_cpus_hold(service_bundles, monkeypatch, providers, cpus, expected):
    """Each load keeps its session's threads busy: with 1-thread sessions, start-up loads as
    many models at once as there are CPUs (it loaded one at a time, leaving the second core of
    a 2-core machine idle); on a GPU one at a time."""
    from service.inference import registry

    monkeypatch.setattr(registry, "available_cpus", lambda: cpus)
    service = registry.Service(Settings(model_repository=service_bundles, intra_op_threads=1))
    service.discover()
    service.providers = providers
    running, most = 0, 0

    async def load_entry(entry):
        nonlocal running, most
        running += 1
        most = max(most, running)
        await asyncio.sleep(0.05)
        running -= 1
        return "not loaded: the test's stand-in"

    monkeypatch.setattr(service, "load_entry", load_entry)
    asyncio.run(service.load_all())
    assert len(service.all_entries()) == 4 and service.loaded
    assert most == expected
