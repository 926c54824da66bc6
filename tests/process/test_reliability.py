"""Reliability and security of the real service, at CI size.

R1 isolation, R2 overload and R4 graceful shutdown run the scenario functions of
bench/reliability/ (the long runs use the same code at full size) against `python -m
service` under uvicorn. R5 bundle integrity: broken bundles are refused at start with a log line
naming the file, /health/ready stays 503 when nothing loads, and nothing in the code base or the
load path unpickles. (R3 fuzzing is tests/process/test_fuzz.py; R6 soak only runs as a script.)
"""

from __future__ import annotations

import ast
import hashlib
import json
import pickle
import pickletools
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.bundles import copy_repository

REPO = Path(__file__).resolve().parents[2]
from bench.harness import GRACEFUL_EXIT_CODES, ServiceProcess  # noqa: E402
from bench.reliability.isolation import run_isolation  # noqa: E402
from bench.reliability.overload import run_overload  # noqa: E402
from bench.reliability.shutdown import run_shutdown  # noqa: E402
from bench.reliability.workload import (  # noqa: E402
    SCORE_TOLERANCE,
    ModelSpec,
    WorkloadMaker,
    answer_problem,
    difference,
)


def show(result: dict) -> None:
    """The figures, for `pytest -s` (and for the report when a check fails)."""
    print("\n" + json.dumps({k: v for k, v in result.items() if k != "rss_samples"}, indent=1))


# --- R1 -------------------------------------------------------------------------------------

def test_isolation_1000_mixed_requests_at_concurrency_64(service_bundles, tmp_path):
    result = run_isolation(service_bundles, requests=1000, concurrency=64, workdir=tmp_path)
    show(result)
    assert result["requests"] == 1000 and result["inputs"] > 1000  # every 7th request has 3 inputs
    assert set(result["models"]) == {"nli", "fever", "sentiment", "topic"}
    assert result["solo_failed"] == 0 and result["solo_batches_of_one"]
    assert result["failed"] == 0, result["statuses"]
    # a swapped answer is only visible if inputs get different answers: they nearly all do
    assert result["distinct_solo_answers"] >= 0.9 * result["distinct_inputs"]
    assert result["mismatches"] == 0, result["mismatch_examples"]
    assert result["max_abs_score_diff"] <= SCORE_TOLERANCE
    # isolation is only exercised by inputs that shared a batch: a good part of them did
    assert result["share_of_inputs_batched_with_others"] > 0.3, result["mean_batch_size"]


def test_answer_comparison_catches_a_swapped_answer():
    """The R1 check itself: another input's answer, a lost evidence score or a flipped
    truncation flag is a mismatch; float noise below the tolerance is not."""
    a = {"label": "x", "scores": {"x": 0.6, "y": 0.4}, "model": "m", "truncated": False, "evidence_scores": [0.7, 0.3]}
    b = {**a, "label": "y", "scores": {"x": 0.45, "y": 0.55}}
    assert difference(a, a) == 0.0
    assert difference({**a, "scores": {"x": 0.6 + 4e-6, "y": 0.4 - 4e-6}}, a) < SCORE_TOLERANCE
    assert difference(b, a) is None  # label differs by more than noise
    assert difference({**a, "scores": {"x": 0.61, "y": 0.39}}, a) > SCORE_TOLERANCE
    assert difference({**a, "evidence_scores": [1.0]}, a) is None
    assert difference({**a, "truncated": True}, a) is None
    assert difference({**a, "model": "other"}, a) is None



def test_ranking_answers_are_checked_and_compared_as_rankings():
    """A rerank answer (TEI's list of {index, score}, best first) is complete only when it ranks
    every text once, best first; against its solo answer each text's score is compared."""
    ranking = [{"index": 1, "score": 0.9}, {"index": 0, "score": 0.2}, {"index": 2, "score": 0.2}]
    assert answer_problem(ranking) is None
    assert answer_problem([ranking[0], ranking[2]]) == "the ranking does not list every text once"
    assert answer_problem([ranking[1], ranking[0], ranking[2]]) == "the ranking is not best first"
    assert answer_problem([{"index": 0}]) == "a ranking entry without a score"
    assert difference(ranking, ranking) == 0.0
    noisy = [{"index": 1, "score": 0.9 + 3e-6}, {"index": 2, "score": 0.2}, {"index": 0, "score": 0.2}]
    assert difference(noisy, ranking) < SCORE_TOLERANCE  # tie order is not a score
    assert difference([{"index": 1, "score": 0.8}, *ranking[1:]], ranking) > SCORE_TOLERANCE
    assert difference(ranking[:2], ranking) is None  # a text lost
    assert difference({"label": "x", "scores": {"x": 1.0}}, ranking) is None


def test_workload_covers_every_task_from_the_registry():
    """The reliability workload builds each task's inputs from its fields (core.tasks): a list
    field gets 1..max_evidence texts, and a task without a batch form (rerank) one input a
    request."""
    from core.tasks import TASKS

    lengths = {name: {f.input: 12 for f in task.fields} for name, task in TASKS.items()}
    models = [ModelSpec(f"m-{name}", name, lengths[name], 4, ("alpha", "beta", "gamma"))
              for name in TASKS]
    # multi_every prime, so whatever the number of tasks every task gets multi-input requests
    requests = WorkloadMaker(models, seed=3).mixed(200, multi_every=7, multi_inputs=3)
    by_path = {}
    for r in requests:
        by_path.setdefault(r.path, []).append(r)
    assert set(by_path) == {task.endpoint for task in TASKS.values()}
    for name, task in TASKS.items():
        for r in by_path[task.endpoint]:
            inputs = r.body.get("inputs", [r.body])
            assert len(inputs) == len(r.solo)
            for x in inputs:
                assert set(x) - {"model"} == set(task.field_names)
                for f in task.fields:
                    assert (isinstance(x[f.name], list) and 1 <= len(x[f.name]) <= 4) if f.many else isinstance(x[f.name], str)
    assert all("inputs" not in r.body for r in by_path["/rerank"])
    assert any("inputs" in r.body for r in by_path["/verify"])


# --- R2 -------------------------------------------------------------------------------------

def test_overload_sheds_with_429_and_recovers(service_bundles, tmp_path):
    result = run_overload(service_bundles, factor=4.0, seconds=4.0, capacity_seconds=2.0, model="fever",
                                      inputs_per_request=64, max_queue=128, request_timeout_ms=1000, workdir=tmp_path)
    show(result)
    statuses = result["statuses"]
    assert statuses.get("429", 0) > 0 and statuses.get("200", 0) > 0, statuses
    assert result["other_5xx"] == 0, statuses
    assert result["transport_errors"] == 0, result["transport_error_examples"]
    assert result["429_without_retry_after"] == 0
    assert result["incomplete_answers"] == 0
    assert result["answered_after_deadline"] == 0, result["server_time_200_ms"]
    # Shedding is cheap (decided before tokenization): typically a few ms of server time. Its
    # tail is the event loop's backlog of other requests' JSON under overload, bounded here
    # by the deadline (the figures printed above are the ones to report).
    assert result["server_time_to_429_ms"]["p50"] < 100, result["server_time_to_429_ms"]
    assert result["server_time_to_429_ms"]["p99"] < 1000, result["server_time_to_429_ms"]
    # the queue bounds memory: no growth beyond noise while 4x capacity is offered
    assert result["rss_mb"]["peak"] - result["rss_mb"]["before"] < 100, result["rss_mb"]
    assert result["ready_after"] == 200 and result["recovery_statuses"] == {"200": 20}
    assert result["queue_depth_after"] == 0


# --- R4 -------------------------------------------------------------------------------------

def test_sigterm_under_sustained_load_answers_every_accepted_request(service_bundles, tmp_path):
    result = run_shutdown(service_bundles, load_seconds=1.5, concurrency=8, shutdown_timeout_s=8.0,
                                      max_batch_delay_ms=50, workdir=tmp_path)
    show(result)
    before, after = result["outcomes_sent_before_sigterm"], result["outcomes_sent_after_sigterm"]
    assert before.get("ok", 0) > 20 and "bad" not in before, before
    assert "bad" not in after, after  # after SIGTERM: complete answers, 503 shutting_down, or no connection
    assert after.get("refused", 0) + after.get("no_connection", 0) > 0, after
    assert result["in_flight_at_sigterm_answered_200"] > 0  # the drain had work to finish
    assert result["fresh_connections_answered_200_after_sigterm"] == 0
    # every response the server started (its access log) reached the client, complete
    assert result["responses_logged_by_server"] == result["responses_received"]
    assert result["dropped_unanswered"] <= 8 + 1
    assert result["exit_code"] in GRACEFUL_EXIT_CODES and result["exit_seconds"] <= 8.0
    assert result["drain_finished"] and not result["drain_timed_out"] and not result["requests_cancelled_by_uvicorn"]


# --- R5 -------------------------------------------------------------------------------------

# A protocol-0 pickle whose loading would call os.mkdir(<marker>): what a hostile "model file"
# carries. Built by hand (and checked with pickletools, which never executes) so the test
# itself unpickles nothing.
def hostile_pickle(marker: Path) -> bytes:
    payload = b"cos\nmkdir\n(V" + str(marker).encode() + b"\ntR."
    ops = [op.name for op, _, _ in pickletools.genops(payload)]
    assert ops == ["GLOBAL", "MARK", "UNICODE", "TUPLE", "REDUCE", "STOP"]
    return payload


def set_checksum(bundle: Path, file: str, key: str) -> None:
    """Make config.json vouch for the (altered) file, as an attacker controlling the bundle would."""
    config = json.loads((bundle / "config.json").read_text())
    config[key] = hashlib.sha256((bundle / file).read_bytes()).hexdigest()
    (bundle / "config.json").write_text(json.dumps(config))


def broken_repository(service_bundles: Path, root: Path) -> dict[str, str]:
    """Every bundle broken in its own way; returns model -> the file its error must name."""
    repo = copy_repository(service_bundles, root)
    model = repo / "nli" / "model.onnx"  # altered after export: checksum mismatch
    data = bytearray(model.read_bytes())
    data[len(data) // 3] ^= 0x01
    model.write_bytes(bytes(data))
    (repo / "fever" / "tokenizer.json").unlink()  # missing tokenizer
    config = json.loads((repo / "topic" / "config.json").read_text())  # 5 labels, 4 logits
    config["labels"] = config["labels"] + ["extra"]
    (repo / "topic" / "config.json").write_text(json.dumps(config))
    (repo / "sentiment" / "model.onnx").write_bytes(hostile_pickle(root / "pwned-model"))  # pickle, checksum fixed
    set_checksum(repo / "sentiment", "model.onnx", "model_sha256")
    return {"nli": str(model), "fever": str(repo / "fever" / "tokenizer.json"),
            "topic": str(repo / "topic" / "config.json"), "sentiment": str(repo / "sentiment" / "model.onnx")}


def test_broken_bundles_are_refused_at_start_and_never_ready(service_bundles, tmp_path):
    named = broken_repository(service_bundles, tmp_path / "repo")
    # partial start-up allowed, so the broken bundles are listed as failed
    server = ServiceProcess(tmp_path / "repo", tmp_path / "service.log", allow_partial_start="true")
    with server.start(ready=False):
        for _ in range(300):
            models = {m["name"]: m for m in httpx.get(server.base + "/v1/models").json()["models"]}
            if models and all(m["status"] != "loading" for m in models.values()):
                break
            time.sleep(0.1)
        ready = httpx.get(server.base + "/health/ready")
        classify = httpx.post(server.base + "/classify", json={"text": "hello"})
        assert server.terminate() < 10
    assert {name: m["status"] for name, m in models.items()} == dict.fromkeys(named, "failed")
    assert ready.status_code == 503 and ready.json()["error"]["code"] == "not_ready"
    assert classify.status_code == 404 and classify.json()["error"]["code"] == "no_model_for_task"
    failures = {r["model"]: r["error"] for r in server.log_records() if r["message"] == "model failed to load"}
    assert set(failures) == set(named)
    for name, file in named.items():
        # the log names the full path; /v1/models only the path inside the repository
        assert file in failures[name], (name, failures[name])
        inside = str(Path(file).relative_to(tmp_path / "repo"))
        assert inside in models[name]["error"] and str(tmp_path) not in models[name]["error"], models[name]

    assert "sha256" in failures["nli"] and "missing" in failures["fever"]
    assert "5 labels" in failures["topic"] and "4 logits" in failures["topic"]
    assert "not an ONNX model" in failures["sentiment"]
    assert not (tmp_path / "pwned-model").exists()
    assert any(r["message"] == "service not ready" for r in server.log_records())


def swap_vocabulary_ids(tokenizer: Path, a: str, b: str) -> None:
    """Alter a tokenizer the way an attacker would: still valid, still loadable, but two words
    swapped (every sentence containing them now means something else to the model)."""
    data = json.loads(tokenizer.read_text(encoding="utf-8"))
    vocab = data["model"]["vocab"]
    vocab[a], vocab[b] = vocab[b], vocab[a]
    tokenizer.write_text(json.dumps(data), encoding="utf-8")


def test_altered_tokenizer_is_refused_by_its_checksum_naming_the_file(service_bundles, tmp_path):
    """Only the tokenizer is altered (the model file and its checksum are intact): the load must
    fail on tokenizer_sha256 alone. A loader that checked only model_sha256 would serve the
    swapped vocabulary silently (the altered file loads fine, as the last lines show)."""
    from core.bundle import BundleError, load_bundle, sha256_file
    from service.inference.runtime import ModelRuntime

    bundle = copy_repository(service_bundles, tmp_path / "repo", ["nli"]) / "nli"
    tokenizer = bundle / "tokenizer.json"
    expected = json.loads((bundle / "config.json").read_text())["tokenizer_sha256"]
    swap_vocabulary_ids(tokenizer, "man", "woman")
    actual = sha256_file(tokenizer)
    assert actual != expected
    message = rf"{tokenizer}: sha256 {actual} does not match config\.json \({expected}\); the file was altered"
    with pytest.raises(BundleError, match=message):
        load_bundle(bundle)
    with pytest.raises(BundleError, match=message):
        ModelRuntime.load(bundle, ["CPUExecutionProvider"], threads=1)
    # the same file, vouched for by config.json, loads: only the checksum refused it above
    set_checksum(bundle, "tokenizer.json", "tokenizer_sha256")
    ModelRuntime.load(bundle, ["CPUExecutionProvider"], threads=1)


def test_weights_in_an_external_data_file_are_refused(service_bundles, tmp_path):
    """A model.onnx that keeps its weights in a weights.bin beside it (config.json
    vouching for model.onnx only) is refused: otherwise zeroing weights.bin would change
    the answers under the same version and model_sha256."""
    onnx = pytest.importorskip("onnx")
    from core.bundle import BundleError, load_bundle
    from service.inference.runtime import ModelRuntime

    bundle = copy_repository(service_bundles, tmp_path / "repo", ["nli"]) / "nli"
    model = onnx.load(bundle / "model.onnx")
    onnx.save_model(model, bundle / "model.onnx", save_as_external_data=True, all_tensors_to_one_file=True,
                    location="weights.bin", size_threshold=1024)
    set_checksum(bundle, "model.onnx", "model_sha256")
    weights = bundle / "weights.bin"
    weights.write_bytes(bytes(weights.stat().st_size))  # tampered: every weight 0
    message = r"model\.onnx: \d+ tensor\(s\) keep their data in external files \(.* -> weights\.bin"
    with pytest.raises(BundleError, match=message):
        load_bundle(bundle)
    with pytest.raises(BundleError, match=message):
        ModelRuntime.load(bundle, ["CPUExecutionProvider"], threads=1)


def test_external_data_is_found_wherever_a_tensor_can_sit():
    """In a subgraph's node attribute, a sparse initializer, a function's node: every place of
    the subset of onnx.proto core.bundle reads, whose field numbers are onnx's own."""
    onnx = pytest.importorskip("onnx")
    from onnx import helper, numpy_helper
    from onnx.external_data_helper import set_external_data

    import numpy as np
    from core.bundle import _ONNX_TENSOR_PLACES, external_data

    for message, fields in _ONNX_TENSOR_PLACES.items():
        descriptor = getattr(onnx, message).DESCRIPTOR
        for name, number, kind in fields:
            field = descriptor.fields_by_name[name]
            assert field.number == number, (message, name)
            assert field.is_repeated == kind.startswith("*"), (message, name)
            if field.message_type is not None:
                assert field.message_type.name == kind.lstrip("*"), (message, name)

    def external(name: str) -> "onnx.TensorProto":
        tensor = numpy_helper.from_array(np.zeros(4, dtype=np.float32), name)
        set_external_data(tensor, location=f"{name}.bin")
        tensor.data_location = onnx.TensorProto.EXTERNAL
        tensor.ClearField("raw_data")
        return tensor

    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [4])
    def graph(nodes, initializers=(), sparse=()):
        return helper.make_graph(nodes, "g", [x], [x], list(initializers), sparse_initializer=list(sparse))
    inner = graph([helper.make_node("Constant", [], ["c"], value=external("in_subgraph"))])
    outer = graph([helper.make_node("If", ["x"], ["x"], then_branch=inner, else_branch=graph([]))],
                  sparse=[helper.make_sparse_tensor(external("sparse_values"),
                                                    numpy_helper.from_array(np.arange(4, dtype=np.int64), "i"), [4])])
    function = helper.make_function("local", "f", ["a"], ["b"],
                                    [helper.make_node("Constant", [], ["b"], value=external("in_function"))],
                                    [helper.make_opsetid("", 17)])
    model = helper.make_model(outer, functions=[function])
    found = sorted(external_data(model.SerializeToString()))
    assert found == ["in_function -> in_function.bin", "in_subgraph -> in_subgraph.bin",
                     "sparse_values -> sparse_values.bin"]
    assert external_data(helper.make_model(graph([])).SerializeToString()) == []


def test_smuggled_pickle_tokenizer_is_refused_naming_the_file(service_bundles, tmp_path):
    from core.bundle import BundleError
    from service.inference.runtime import ModelRuntime

    bundle = copy_repository(service_bundles, tmp_path / "repo", ["topic"]) / "topic"
    (bundle / "tokenizer.json").write_bytes(hostile_pickle(tmp_path / "pwned-tokenizer"))
    set_checksum(bundle, "tokenizer.json", "tokenizer_sha256")
    with pytest.raises(BundleError, match=r"tokenizer\.json: tokenizers cannot load it"):
        ModelRuntime.load(bundle, ["CPUExecutionProvider"], threads=1)
    assert not (tmp_path / "pwned-tokenizer").exists()


def test_loading_bundles_never_unpickles(service_bundles, monkeypatch):
    """Every test bundle loads, warms up and answers with Python's unpickler disabled."""
    from service.inference.runtime import ModelRuntime

    def refuse(*args, **kwargs):
        raise AssertionError("something unpickled")

    for module in (pickle, sys.modules.get("_pickle")):
        for name in ("load", "loads", "Unpickler"):
            if module is not None and hasattr(module, name):
                monkeypatch.setattr(module, name, refuse)
    for path in sorted(p for p in service_bundles.iterdir() if p.is_dir()):
        runtime = ModelRuntime.load(path, ["CPUExecutionProvider"], threads=1)
        assert runtime.warmup(max_batch_size=2, max_batch_tokens=4096) > 0


# Calls that deserialize Python objects from bytes, by the name they are called through.
UNPICKLING_MODULES = {"pickle", "_pickle", "cPickle", "dill", "cloudpickle", "joblib", "shelve", "marshal"}
UNPICKLING_CALLS = {"torch.load", "torch.jit.load", "pd.read_pickle", "pandas.read_pickle", "np.load", "numpy.load",
                    "torch.serialization.load"}


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return "?"


def unpickling_sites(tree: ast.AST) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [f"import {a.name}" for a in node.names if a.name.split(".")[0] in UNPICKLING_MODULES]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in UNPICKLING_MODULES:
            found.append(f"from {node.module} import")
        elif isinstance(node, ast.Call):
            name = _dotted(node.func)
            if name.endswith("read_pickle") or name in UNPICKLING_CALLS - {"np.load", "numpy.load"}:
                found.append(f"{name}() line {node.lineno}")
            elif name in ("np.load", "numpy.load"):
                pickle_ok = [k for k in node.keywords if k.arg == "allow_pickle"]
                if pickle_ok and not (isinstance(pickle_ok[0].value, ast.Constant) and pickle_ok[0].value.value is False):
                    found.append(f"{name}(allow_pickle=...) line {node.lineno}")
    return found


def test_unpickling_scan_finds_what_it_looks_for():
    source = ("import pickle\nfrom joblib import load\nimport torch, numpy as np\n"
              "torch.load('w.pt')\nnp.load('a.npy', allow_pickle=True)\nnp.load('b.npy', allow_pickle=False)\n")
    assert unpickling_sites(ast.parse(source)) == [
        "import pickle", "from joblib import", "torch.load() line 4", "np.load(allow_pickle=...) line 5"]


def test_no_code_path_unpickles():
    packages = ["service", "export", "training", "models", "cli", "bench"]
    files = [f for package in packages for f in sorted((REPO / package).rglob("*.py"))]
    assert len(files) > 20
    found = {str(f.relative_to(REPO)): sites for f in files if (sites := unpickling_sites(ast.parse(f.read_text())))}
    assert not found, found


def test_serving_code_loads_files_only_through_onnxruntime_and_tokenizers():
    """service/ and core/ (what the serving image holds) import nothing that can deserialize
    code-carrying formats: their third-party imports are the web stack, numpy (arrays they
    build themselves), and the two loaders."""
    allowed = {"numpy", "onnxruntime", "tokenizers", "fastapi", "starlette", "pydantic", "pydantic_settings",
               "prometheus_client", "uvicorn", "typer", "service", "core",
               "rich",  # typer's help renderer (service/process/commands.py escapes the flags' help): prints, loads no file
               "httptools",  # service/http/http.py: uvicorn's own parser, for its exception classes
               "google",  # protobuf (onnxruntime's own dependency): core/bundle.py reads where tensors keep their data
               "opentelemetry"}  # service/tracing.py, only with ATTSERVE_OTLP_ENDPOINT: writes spans, reads nothing
    third_party = set()
    for f in sorted([*(REPO / "service").rglob("*.py"), *(REPO / "core").glob("*.py")]):
        for node in ast.walk(ast.parse(f.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else [])
            third_party |= {n.split(".")[0] for n in names} - set(sys.stdlib_module_names)
    assert third_party <= allowed, third_party - allowed
    assert {"onnxruntime", "tokenizers"} <= third_party
