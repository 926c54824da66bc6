"""Reading and loading bundles in a changing repository (core.bundle, service.inference.registry,
service.inference.model_control): the bytes hashed are the bytes served, the allow-list bounds
every mode, a name and version in two folders or a flat bundle beside version folders is refused
with its reason (no reload loop), one rule for a session's threads, and what reasons may show."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from core.bundle import BundleError
from service.settings import Settings
from tests.bundles import copy_repository, running_app

VERIFY = {"claim": "a dog runs", "evidence": ["a dog runs fast", "the sky is blue"]}
VERSION = "x-attserve-model-version"


def settings(repo: Path, **over) -> Settings:
    return Settings(model_repository=repo, max_batch_delay_ms=1, **over)


def other_graph(bundle: Path, target: Path) -> None:
    """A valid graph of the same shapes as `bundle`'s, with other weights (every float
    initializer tripled): it loads, and answers differently."""
    onnx = pytest.importorskip("onnx")
    from onnx import numpy_helper

    model = onnx.load(bundle / "model.onnx")
    for tensor in model.graph.initializer:
        values = numpy_helper.to_array(tensor)
        if values.dtype == np.float32 and values.size > 1:
            tensor.CopyFrom(numpy_helper.from_array(values * 3, tensor.name))
    onnx.save(model, target)


def feeds(runtime) -> dict[str, np.ndarray]:
    """Some token ids for every input of `runtime`'s graph."""
    rng = np.random.RandomState(0)
    out = {}
    for i in runtime.session.get_inputs():
        shape = [3] * len(i.shape)
        out[i.name] = rng.randint(2, 30, size=shape).astype(np.int64)
    return out


def test_the_graph_served_is_the_graph_hashed_when_the_file_is_swapped_mid_load(service_bundles, tmp_path, monkeypatch):
    """model.onnx is replaced (atomic rename) by another valid graph after the loader hashed it
    and before onnxruntime builds the session: the session is still the graph whose sha256
    config.json vouches for (a loader that reads the path a second time serves the swapped one)."""
    import onnxruntime as ort

    from service.inference import runtime as runtime_module
    from service.inference.runtime import ModelRuntime

    bundle = copy_repository(service_bundles, tmp_path / "repo", ["fever"]) / "fever"
    genuine = ModelRuntime.load(bundle, ["CPUExecutionProvider"], threads=1)
    other_graph(bundle, tmp_path / "other.onnx")
    real_session = ort.InferenceSession

    def swap_then_build(*args, **kwargs):
        (tmp_path / "other.onnx").replace(bundle / "model.onnx")  # the file changes between hash and build
        return real_session(*args, **kwargs)

    monkeypatch.setattr(runtime_module.ort, "InferenceSession", swap_then_build)
    loaded = ModelRuntime.load(bundle, ["CPUExecutionProvider"], threads=1)
    monkeypatch.setattr(runtime_module.ort, "InferenceSession", real_session)
    x = feeds(genuine)
    assert all(np.array_equal(a, b) for a, b in zip(genuine.session.run(None, x), loaded.session.run(None, x)))
    # the swapped graph really answers otherwise (and is refused by its checksum on the next load)
    other = real_session(str(bundle / "model.onnx"), providers=["CPUExecutionProvider"])
    assert not np.allclose(genuine.session.run(None, x)[0], other.run(None, x)[0])
    with pytest.raises(BundleError, match="does not match config.json"):
        ModelRuntime.load(bundle, ["CPUExecutionProvider"], threads=1)


@pytest.fixture
def repository(versioned) -> Path:
    """fever as versions 1 and 2 (numbered folders) and nli flat (tests.bundles.versioned)."""
    return versioned


def index_rows(response) -> dict[tuple[str, str], dict]:
    return {(r["name"], r["version"]): r for r in response.json()}


def test_the_allow_list_bounds_poll_and_explicit_loads(repository, service_bundles, caplog):
    """ATTSERVE_MODELS=nli: a bundle outside it is never loaded, by the poll (logged once) or
    by an explicit load (a 400 naming the allow-list); the index says why it is not served."""
    shutil.copytree(service_bundles / "sentiment", repository / "sentiment")

    async def polled():
        async with running_app(settings(repository, models=["nli"], model_control_mode="poll",
                                        repository_poll_s=0.1)) as (app, client):
            await asyncio.sleep(0.8)  # several polls
            return (await client.post("/classify", json={"text": "a fine day"}),
                    await client.post("/verify", json=VERIFY), await client.post("/v2/repository/index"))

    async def explicit():
        async with running_app(settings(repository, models=["nli"], model_control_mode="explicit")) as (app, client):
            return (await client.post("/v2/repository/models/sentiment/load"),
                    await client.post("/classify", json={"text": "a fine day"}))

    with caplog.at_level("WARNING", logger="service.inference.model_control"):
        classify, verify, index = asyncio.run(polled())
    assert classify.status_code == verify.status_code == 404  # no model of those tasks is served
    rows = index_rows(index)
    assert rows[("sentiment", "test-3")]["state"] == "UNAVAILABLE"
    assert "ATTSERVE_MODELS" in rows[("sentiment", "test-3")]["reason"]
    skipped = [r for r in caplog.records if "not in ATTSERVE_MODELS" in r.getMessage()]
    assert sorted(r.model for r in skipped) == ["fever", "sentiment"]  # each once, however many polls
    load, after = asyncio.run(explicit())
    assert load.status_code == 400 and "allow-list ATTSERVE_MODELS (nli)" in load.json()["error"], load.text
    assert after.status_code == 404


def test_one_version_in_two_folders_is_refused_with_its_reason_and_never_reloaded(repository):
    """`cp -a nli nli-copy` while nli serves: the poll does not reload it back and forth (the
    same load serves on), the index and an explicit load say why; removing the copy clears it."""
    async def polled():
        async with running_app(settings(repository, model_control_mode="poll", repository_poll_s=0.1)) as (app, client):
            first = app.state.service.versions["nli"]["test-1"]
            shutil.copytree(repository / "nli", repository / "nli-copy")
            await asyncio.sleep(1.0)  # ten polls
            during = (app.state.service.versions["nli"]["test-1"], await client.post("/v2/repository/index"),
                      await client.post("/entailment", json={"premise": "a man", "hypothesis": "a man"}))
            shutil.rmtree(repository / "nli-copy")
            await asyncio.sleep(0.5)
            return first, during, app.state.service.versions["nli"]["test-1"], await client.post("/v2/repository/index")

    first, (serving, index, answer), after, index_after = asyncio.run(polled())
    assert serving is first and after is first  # never reloaded
    reason = index_rows(index)[("nli", "test-1")]["reason"]
    assert "'nli' version 'test-1' is in 2 folders (nli, nli-copy)" in reason, reason
    assert answer.status_code == 200
    assert index_rows(index_after)[("nli", "test-1")]["reason"] == ""

    async def explicit():
        async with running_app(settings(repository, model_control_mode="explicit")) as (app, client):
            first = app.state.service.versions["nli"]["test-1"]
            shutil.copytree(repository / "nli", repository / "nli-copy")
            loads = [await client.post("/v2/repository/models/nli/load") for _ in range(2)]
            return first, loads, app.state.service.versions["nli"]["test-1"]

    first, loads, serving = asyncio.run(explicit())
    assert [r.status_code for r in loads] == [400, 400] and "is in 2 folders" in loads[0].json()["error"]
    assert serving is first


def test_a_flat_bundle_beside_version_folders_is_refused_and_moving_it_into_its_version_folder_keeps_it(
        repository, service_bundles):
    """A version folder next to a flat bundle's config.json is refused loudly (load answer, index),
    the flat bundle serving on; moved into a folder named its own version, it keeps that version
    and its metrics series."""
    from tests.bundles import metric_samples

    fever = repository / "fever"
    shutil.rmtree(fever)
    shutil.copytree(service_bundles / "fever", fever)  # flat: version test-2

    async def scenario():
        async with running_app(settings(repository, model_control_mode="explicit")) as (app, client):
            out = {"before": await client.post("/verify", json=VERIFY)}
            shutil.copytree(service_bundles / "fever", fever / "2")
            out["mixed"] = await client.post("/v2/repository/models/fever/load")
            out["index"] = await client.post("/v2/repository/index")
            out["during"] = await client.post("/verify", json=VERIFY)
            shutil.rmtree(fever / "2")
            staging = fever / ".test-2"  # hidden while it fills, then renamed: never half a bundle
            staging.mkdir()
            for file in ("config.json", "model.onnx", "tokenizer.json"):
                (fever / file).rename(staging / file)
            staging.rename(fever / "test-2")
            out["moved"] = await client.post("/v2/repository/models/fever/load")
            out["after"] = await client.post("/verify", json=VERIFY)
            out["metrics"] = (await client.get("/metrics")).text
            return out

    out = asyncio.run(scenario())
    assert out["mixed"].status_code == 400, out["mixed"].text
    message = out["mixed"].json()["error"]
    assert "fever: a bundle (config.json) beside version folders (2)" in message
    assert "fever/test-2/" in message and str(repository) not in message
    rows = index_rows(out["index"])
    assert rows[("fever", "2")]["state"] == "UNAVAILABLE" and "beside version folders" in rows[("fever", "2")]["reason"]
    assert rows[("fever", "test-2")]["state"] == "READY" and "beside version folders" in rows[("fever", "test-2")]["reason"]
    assert out["during"].status_code == 200 and out["during"].headers[VERSION] == "test-2"
    assert out["moved"].status_code == 200, out["moved"].text
    assert out["after"].headers[VERSION] == "test-2" and out["after"].json()["scores"] == out["before"].json()["scores"]
    series = {dict(k)["version"]: v for k, v in metric_samples(out["metrics"], "attserve_version_requests_total").items()
              if dict(k)["model"] == "fever"}
    assert series == {"test-2": 3}  # before, during and after: one series


def test_a_session_gets_the_same_threads_at_start_and_at_a_later_load(repository, monkeypatch):
    """12 CPUs over 3 versions: 4 threads each at start, and 4 again for a version that comes
    back after it was removed (not the whole machine, as a load of one model would get)."""
    import service.settings

    monkeypatch.setattr(service.settings, "available_cpus", lambda: 12)
    parked = repository / "fever" / ".2"

    async def scenario():
        async with running_app(settings(repository, model_control_mode="explicit")) as (app, client):
            versions = app.state.service.versions
            at_start = {(n, v): e.runtime.threads for n in versions for v, e in versions[n].items()}
            (repository / "fever" / "2").rename(parked)
            assert (await client.post("/v2/repository/models/fever/load")).status_code == 200
            parked.rename(repository / "fever" / "2")
            assert (await client.post("/v2/repository/models/fever/load")).status_code == 200
            return at_start, versions["fever"]["2"].runtime.threads

    at_start, reloaded = asyncio.run(scenario())
    assert at_start == {("fever", "1"): 4, ("fever", "2"): 4, ("nli", "test-1"): 4}
    assert reloaded == 4


def test_reasons_never_show_file_content_links_out_or_server_paths(repository, tmp_path, monkeypatch):
    """A config.json that quotes a secret, a model.onnx linked in from outside the repository, a
    config.json too big to read, and a model with no bundle: the index and the load answers say
    why without the secret, without loading the link, without reading the big file twice and
    without the server's paths."""
    from service.inference import registry

    secret = "s3cr3t-token-value"
    leaky = repository / "leaky"
    shutil.copytree(repository / "nli", leaky)
    config = json.loads((leaky / "config.json").read_text())
    (leaky / "config.json").write_text(json.dumps({**config, "name": "leaky", "api_token": secret, "task": secret}))
    linked = tmp_path / "linked"  # put in the repository once it serves (links are followed at start only)
    shutil.copytree(repository / "nli", linked)
    (linked / "config.json").write_text(json.dumps({**config, "name": "linked"}))
    outside = tmp_path / "outside.onnx"
    (linked / "model.onnx").rename(outside)
    (linked / "model.onnx").symlink_to(outside)
    huge = repository / "huge"
    huge.mkdir()
    (huge / "config.json").write_text(json.dumps({"description": "x" * (2 << 20)}))

    async def scenario():
        async with running_app(settings(repository, model_control_mode="explicit", allow_partial_start=True)) \
                as (app, client):
            linked.rename(repository / "linked")
            reads = []
            real_read = registry.read_config
            monkeypatch.setattr(registry, "read_config", lambda path: reads.append(path) or real_read(path))
            indexes = [await client.post("/v2/repository/index") for _ in range(2)]
            return (indexes, list(reads), await client.post("/v2/repository/models/leaky/load"),
                    await client.post("/v2/repository/models/linked/load"),
                    await client.post("/v2/repository/models/nothing/load"))

    indexes, reads, leaky_load, linked_load, missing = asyncio.run(scenario())
    rows = index_rows(indexes[0])
    assert indexes[0].json() == indexes[1].json()
    assert reads == [repository / "linked" / "config.json"]  # the new bundle's, once: the rest were parsed at start
    assert "bytes, over the 1048576 a bundle config may hold" in rows[("huge", "1")]["reason"]
    for text in (indexes[0].text, leaky_load.text):
        assert "api_token: Extra inputs are not permitted" in text and secret not in text
    assert linked_load.status_code == 400 and "outside the model repository" in linked_load.json()["error"]
    assert rows[("linked", "test-1")]["state"] == "UNAVAILABLE" and "outside" in rows[("linked", "test-1")]["reason"]
    assert missing.status_code == 404 and "no bundle of model 'nothing'" in missing.json()["error"]
    for answer in (*indexes, leaky_load, linked_load, missing):
        assert str(tmp_path) not in answer.text


def test_the_service_scoring_and_bench_build_a_runtime_the_same_way(service_bundles, tmp_path, monkeypatch):
    """service.inference.runtime.load_runtime is the one place a bundle becomes a runtime: the
    registry, `attserve score` (scoring.files) and the benchmarks (bench.engine) all go through it,
    with the providers of the device asked for and the threads given."""
    from bench import engine as bench_engine
    from scoring import files as scoring_files
    from service.inference import registry
    from service.inference import runtime as runtime_module

    built = []
    real = runtime_module.load_runtime

    def spy(bundle, settings, threads=None):
        runtime = real(bundle, settings, threads)
        built.append((Path(bundle).name, settings.device, runtime.provider, runtime.threads))
        return runtime

    monkeypatch.setattr(runtime_module, "load_runtime", spy)
    monkeypatch.setattr(registry, "load_runtime", spy)
    bench_engine.load_runtime(service_bundles / "nli", 2)
    scoring_files.load_engine_parts(service_bundles / "topic", 1, 4)
    repo = copy_repository(service_bundles, tmp_path / "repo", ["sentiment"])
    asyncio.run(_start_and_stop(settings(repo, device="cpu", intra_op_threads=3)))
    assert built == [("nli", "cpu", "CPUExecutionProvider", 2), ("topic", "cpu", "CPUExecutionProvider", 1),
                     ("sentiment", "cpu", "CPUExecutionProvider", 3)]


async def _start_and_stop(service_settings: Settings) -> None:
    async with running_app(service_settings):
        pass
