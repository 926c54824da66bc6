"""Models changed while serving (service.inference.model_control, service.http.repository_api): versions side
by side, explicit load / unload / reload through the repository API with no failed request,
refusals that leave the old load serving, poll mode, the canary share; in process (ASGI).
tritonclient and several workers: tests/process/test_model_control_process.py."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from pathlib import Path

import pytest

from service.settings import Settings
from tests.bundles import metric_samples, running_app

VERIFY = {"claim": "a dog runs", "evidence": ["a dog runs fast", "the sky is blue"]}
VERSION = "x-attserve-model-version"


def settings(repo: Path, **over) -> Settings:
    return Settings(model_repository=repo, max_batch_delay_ms=1, **over)


def corrupt(bundle: Path) -> None:
    graph = bundle / "model.onnx"
    data = bytearray(graph.read_bytes())
    data[len(data) // 2] ^= 0xFF
    graph.write_bytes(bytes(data))


def test_versions_are_served_side_by_side_and_the_newest_by_default(versioned):
    async def scenario():
        async with running_app(settings(versioned)) as (app, client):
            newest = await client.post("/verify", json=VERIFY)
            first = await client.post("/verify", json={**VERIFY, "version": "1"})
            batch = await client.post("/verify", json={"inputs": [VERIFY], "version": "1"})
            missing = await client.post("/verify", json={**VERIFY, "version": "3"})
            oip = await client.post("/v2/models/fever/versions/1/infer", json={"inputs": [
                {"name": "claim", "shape": [1], "datatype": "BYTES", "data": ["a dog runs"]},
                {"name": "evidence", "shape": [1, 1], "datatype": "BYTES", "data": ["a dog runs fast"]}]})
            models = (await client.get("/v1/models")).json()
            control = await client.post("/v2/repository/index")
            return newest, first, batch, missing, oip, models, control
    newest, first, batch, missing, oip, models, control = asyncio.run(scenario())
    assert newest.headers[VERSION] == "2" and first.headers[VERSION] == batch.headers[VERSION] == "1"
    assert newest.json()["scores"] == first.json()["scores"]  # the same files, two loads
    assert missing.status_code == 422 and "its versions: ['1', '2']" in missing.json()["error"]["message"]
    assert oip.status_code == 200 and oip.json()["model_version"] == "1"
    fever = next(m for m in models["models"] if m["name"] == "fever")
    assert fever["version"] == "2" and [(v["version"], v["state"], v["default"]) for v in fever["versions"]] == \
        [("1", "READY", False), ("2", "READY", True)]
    assert control.status_code == 404  # the repository API is off in the default mode (none)


def test_reloads_under_load_fail_no_request_and_free_the_old_loads(versioned):
    """Requests keep coming while version 2 is unloaded and loaded again and version 1 reloaded
    in place: every answer is a 200 from a version that was serving."""
    parked = versioned / "fever" / ".2"

    async def scenario():
        async with running_app(settings(versioned, model_control_mode="explicit")) as (app, client):
            service = app.state.service
            first_load = service.versions["fever"]["1"]
            answers: list = []
            stop = asyncio.Event()

            async def keep_asking(explain: bool) -> None:
                while not stop.is_set():
                    answers.append(await client.post("/verify", json={**VERIFY, "explain": explain}))

            senders = [asyncio.create_task(keep_asking(i % 4 == 0)) for i in range(8)]
            controls = []
            for round_ in range(6):
                if round_ % 3 == 0:
                    os.rename(versioned / "fever" / "2", parked)  # version 2 goes: default back to 1
                elif round_ % 3 == 1:
                    os.rename(parked, versioned / "fever" / "2")  # and comes back
                else:
                    os.utime(versioned / "fever" / "1" / "config.json", (1, round_))  # 1 changed on disk
                controls.append(await client.post("/v2/repository/models/fever/load"))
                await asyncio.sleep(0.05)
            stop.set()
            await asyncio.gather(*senders)
            await asyncio.sleep(0.1)  # the last retired loads drain
            return answers, controls, first_load, service.versions["fever"]
    answers, controls, first_load, versions = asyncio.run(scenario())
    assert [c.status_code for c in controls] == [200] * 6
    assert len(answers) > 50
    assert {a.status_code for a in answers} == {200}, [a.text for a in answers if a.status_code != 200][:3]
    assert {a.headers[VERSION] for a in answers} == {"1", "2"}
    assert set(versions) == {"1", "2"} and versions["1"] is not first_load
    assert first_load.retired and first_load.engine is None  # drained and let go


def test_a_bundle_that_cannot_load_leaves_the_old_one_serving(versioned, tmp_path):
    outside = tmp_path / "outside" / "intruder"
    shutil.copytree(versioned / "nli", outside)
    config = json.loads((outside / "config.json").read_text())
    (outside / "config.json").write_text(json.dumps({**config, "name": "intruder"}))

    async def scenario():
        async with running_app(settings(versioned, model_control_mode="explicit")) as (app, client):
            out = {}
            corrupt(versioned / "fever" / "2")
            out["corrupt"] = await client.post("/v2/repository/models/fever/load")
            out["after_corrupt"] = await client.post("/verify", json=VERIFY)
            shutil.rmtree(versioned / "fever" / "2")
            shutil.copytree(versioned / "nli", versioned / "fever" / "2")  # an entailment bundle named...
            config = json.loads((versioned / "fever" / "2" / "config.json").read_text())
            (versioned / "fever" / "2" / "config.json").write_text(json.dumps({**config, "name": "fever"}))
            out["other_task"] = await client.post("/v2/repository/models/fever/load")
            out["after_other_task"] = await client.post("/verify", json=VERIFY)
            (versioned / "intruder").symlink_to(outside)  # a bundle linked in from elsewhere
            out["outside"] = await client.post("/v2/repository/models/intruder/load")
            out["after_outside"] = await client.post("/entailment", json={"premise": "a man", "hypothesis": "a man"})
            out["path"] = await client.post("/v2/repository/models/..%2E/load")
            out["index"] = await client.post("/v2/repository/index")
            out["metrics"] = (await client.get("/metrics")).text
            return out
    out = asyncio.run(scenario())
    for case, needle in (("corrupt", "version 2"), ("other_task", "does entailment, the model 'fever' serves "
                                                                 "verification"), ("outside", "outside the model repository")):
        assert out[case].status_code == 400 and needle in out[case].json()["error"], (case, out[case].text)
    assert out["after_corrupt"].status_code == out["after_other_task"].status_code == 200
    assert out["after_corrupt"].headers[VERSION] == "2"  # the old load of version 2 serves on
    assert out["after_outside"].status_code == 200 and out["after_outside"].headers[VERSION] == "test-1"
    assert out["path"].status_code == 404
    rows = {(r["name"], r["version"]): r for r in out["index"].json()}
    assert rows[("fever", "2")]["state"] == "READY" and rows[("fever", "2")]["reason"].startswith("last reload failed")
    assert ("intruder", "test-1") in rows and rows[("intruder", "test-1")]["state"] == "UNAVAILABLE"
    failures = metric_samples(out["metrics"], "attserve_model_load_failures_total")
    assert failures[(("model", "fever"),)] == 2 and failures[(("model", "intruder"),)] == 1


def test_poll_mode_picks_up_new_changed_and_removed_bundles(versioned, service_bundles):
    async def scenario():
        async with running_app(settings(versioned, model_control_mode="poll", repository_poll_s=0.2)) as (app, client):
            out = {"before": await client.post("/classify", json={"text": "a fine day"})}
            shutil.copytree(service_bundles / "sentiment", versioned / "sentiment")
            await asyncio.sleep(0.6)  # two intervals, and the load
            out["added"] = await client.post("/classify", json={"text": "a fine day"})
            shutil.rmtree(versioned / "fever" / "2")
            await asyncio.sleep(0.6)
            out["removed"] = await client.post("/verify", json=VERIFY)
            corrupt(versioned / "sentiment")
            await asyncio.sleep(0.6)
            out["corrupt"] = await client.post("/classify", json={"text": "a fine day"})
            out["load"] = await client.post("/v2/repository/models/sentiment/load")
            out["index"] = (await client.post("/v2/repository/index")).json()
            return out
    out = asyncio.run(scenario())
    assert out["before"].status_code == 404 and out["added"].status_code == 200
    assert out["removed"].headers[VERSION] == "1"
    assert out["corrupt"].status_code == 200  # the load before the files broke serves on
    assert out["load"].status_code == 400 and "poll mode" in out["load"].json()["error"]
    assert ("fever", "2") not in {(r["name"], r["version"]) for r in out["index"]}


def test_a_canary_takes_its_share_and_is_counted_per_version(versioned):
    async def scenario():
        async with running_app(settings(versioned, model_control_mode="explicit")) as (app, client):
            out = {}
            for share in (1.0, 0.0):
                r = await client.post("/v2/repository/models/fever/canary", json={"version": "1", "share": share})
                assert r.status_code == 200, r.text
                out[share] = [(await client.post("/verify", json=VERIFY)).headers[VERSION] for _ in range(10)]
            await client.post("/v2/repository/models/fever/canary", json={"version": "2", "share": 0.5})
            out["half"] = [(await client.post("/verify", json=VERIFY)).headers[VERSION] for _ in range(60)]
            out["unknown"] = await client.post("/v2/repository/models/fever/canary", json={"version": "7", "share": 1})
            out["metrics"] = (await client.get("/metrics")).text
            return out
    out = asyncio.run(scenario())
    assert out[1.0] == ["1"] * 10 and out[0.0] == ["2"] * 10
    # the canary is the newest: the rest of the share goes to the other version
    assert 10 < out["half"].count("1") < 50 and 10 < out["half"].count("2") < 50
    assert out["unknown"].status_code == 404
    counts = metric_samples(out["metrics"], "attserve_version_requests_total")
    by_version = {dict(k)["version"]: v for k, v in counts.items() if dict(k)["model"] == "fever"}
    assert by_version["1"] >= 10 and by_version["2"] >= 10


def test_the_repository_api_needs_its_own_key_when_keys_are_set(versioned):
    task_key, control_key = "task-key-0123456789abcdef", "control-key-0123456789abcdef"

    async def scenario():
        async with running_app(settings(versioned, model_control_mode="explicit", api_keys=task_key,
                                        control_api_keys=control_key)) as (app, client):
            def bearer(key):
                return {"authorization": f"Bearer {key}"}
            return (await client.post("/v2/repository/index"),
                    await client.post("/v2/repository/index", headers=bearer(task_key)),
                    await client.post("/v2/repository/index", headers=bearer(control_key)),
                    await client.post("/verify", json=VERIFY, headers=bearer(control_key)),
                    await client.post("/verify", json=VERIFY, headers=bearer(task_key)))
    none, task, control, verify_with_control, verify_with_task = asyncio.run(scenario())
    assert none.status_code == task.status_code == 401 and control.status_code == 200
    assert verify_with_control.status_code == 401 and verify_with_task.status_code == 200
    with pytest.raises(ValueError, match="control_api_keys"):
        Settings(model_repository=versioned, model_control_mode="explicit", api_keys=task_key)


def test_a_reload_frees_the_old_session_without_a_collector_pass(versioned):
    import gc
    import weakref

    async def scenario():
        async with running_app(settings(versioned, model_control_mode="explicit")) as (app, client):
            old = app.state.service.versions["fever"]["1"]
            session = weakref.ref(old.runtime)
            del old
            os.utime(versioned / "fever" / "1" / "config.json", (1, 2))
            assert (await client.post("/v2/repository/models/fever/load")).status_code == 200
            await asyncio.sleep(0.2)  # its drain
            return session() is None
    gc.disable()  # only reference counting may free it
    try:
        assert asyncio.run(scenario())
    finally:
        gc.enable()


def test_a_request_whose_version_was_unloaded_meanwhile_goes_to_the_default_unless_it_named_it(versioned):
    from service.inference.errors import UnknownModel
    from service.inference.dataplane import current_load

    async def scenario():
        async with running_app(settings(versioned, model_control_mode="explicit")) as (app, client):
            service = app.state.service
            resolved = service.resolve("fever", "verification")  # version 2, the default
            shutil.rmtree(versioned / "fever" / "2")
            assert (await client.post("/v2/repository/models/fever/load")).status_code == 200
            follows = current_load(service, resolved, None)
            with pytest.raises(UnknownModel, match="version '2' was unloaded"):
                current_load(service, resolved, "2")
            return resolved, follows
    resolved, follows = asyncio.run(scenario())
    assert resolved.version == "2" and resolved.retired and follows.version == "1" and not follows.retired
