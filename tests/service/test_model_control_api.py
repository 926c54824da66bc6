"""The repository API's contract (service.http.repository_api over service.inference.model_control):
version-aware unload and its guard on a task's default, readiness of a task left without a model,
a canary staged with its load, the bodies it refuses, its error shape, and the workers' control
log passing a bad entry instead of wedging; in process (ASGI)."""

from __future__ import annotations

import asyncio
import logging
import shutil
from types import SimpleNamespace

import service.inference.model_control as model_control
from tests.bundles import metric_samples, running_app
from tests.service.test_model_control import VERIFY, VERSION, settings

REPO = "/v2/repository/models"


def verify_versions(answers) -> list[str]:
    assert {a.status_code for a in answers} == {200}, [a.text for a in answers if a.status_code != 200][:2]
    return [a.headers[VERSION] for a in answers]


def repository_error(response, status: int, code: str) -> str:
    """The repository API's error: the protocol's string, the service's code beside it."""
    body = response.json()
    assert response.status_code == status and set(body) == {"error", "code"}, response.text
    assert body["code"] == code and isinstance(body["error"], str)
    return body["error"]


def test_unloading_one_version_leaves_the_others_serving_and_the_last_one_needs_force(versioned):
    async def scenario():
        async with running_app(settings(versioned, model_control_mode="explicit")) as (app, client):
            out = {"one": await client.post(f"{REPO}/fever/unload", json={"version": "1"})}
            out["after_one"] = [await client.post("/verify", json=VERIFY) for _ in range(3)]
            out["models"] = (await client.get("/v1/models")).json()
            out["index"] = (await client.post("/v2/repository/index")).json()
            out["last"] = await client.post(f"{REPO}/fever/unload", json={"parameters": {"version": "2"}})
            out["after_last"] = await client.post("/verify", json=VERIFY)
            out["forced"] = await client.post(f"{REPO}/fever/unload",
                                              json={"parameters": {"version": "2", "force": True}})
            out["gone"] = await client.post("/verify", json=VERIFY)
            out["ready"] = await client.get("/health/ready")
            out["v2_ready"] = await client.get("/v2/health/ready")
            out["listed"] = (await client.get("/v1/models")).json()
            out["back"] = await client.post(f"{REPO}/fever/load")
            out["ready_again"] = await client.get("/health/ready")
            return out
    out = asyncio.run(scenario())
    assert out["one"].status_code == 200, out["one"].text
    assert verify_versions(out["after_one"]) == ["2"] * 3
    fever = next(m for m in out["models"]["models"] if m["name"] == "fever")
    assert [(v["version"], v["default"]) for v in fever["versions"]] == [("2", True)]
    rows = {(r["name"], r["version"]): r for r in out["index"]}
    assert (rows[("fever", "1")]["state"], rows[("fever", "1")]["reason"]) == ("UNAVAILABLE", "unloaded")
    assert rows[("fever", "2")]["state"] == "READY"
    # the last ready version of the verification default: refused, saying how, and still serving
    message = repository_error(out["last"], 409, "would_remove_default")
    assert "verification would have no model" in message and '"force": true' in message
    assert out["after_last"].status_code == 200 and out["after_last"].headers[VERSION] == "2"
    assert out["forced"].status_code == 200
    assert out["gone"].status_code == 404 and out["gone"].json()["error"]["code"] == "no_model_for_task"
    # both readiness endpoints say the task lost its model
    assert out["ready"].status_code == 503 and "verification" in out["ready"].json()["error"]["message"]
    assert out["v2_ready"].status_code == 400 and out["v2_ready"].json() == {"ready": False}
    assert out["listed"]["tasks"]["verification"]["default"] is None
    assert out["back"].status_code == 200 and out["ready_again"].status_code == 200


def test_unload_bodies_it_does_not_take_are_400s_that_say_what_to_send(versioned):
    async def scenario():
        async with running_app(settings(versioned, model_control_mode="explicit")) as (app, client):
            out = {}
            for case, body in (("typo", {"versoin": "1"}), ("nested_typo", {"parameters": {"versions": "1"}}),
                               ("number", {"version": 1}), ("not_json", "{"), ("unknown_version", {"version": "7"}),
                               ("disagree", {"version": "1", "parameters": {"version": "2"}})):
                kwargs = {"content": body} if isinstance(body, str) else {"json": body}
                out[case] = await client.post(f"{REPO}/fever/unload", **kwargs)
            out["load_parameters"] = await client.post(f"{REPO}/fever/load", json={"parameters": 5})
            out["load_config"] = await client.post(f"{REPO}/fever/load", json={"parameters": {"config": "{}"}})
            out["still"] = [await client.post("/verify", json={**VERIFY, "version": v}) for v in ("1", "2")]
            return out
    out = asyncio.run(scenario())
    assert "versoin: unknown field; send" in repository_error(out["typo"], 400, "invalid_request")
    assert "parameters.versions: unknown field" in repository_error(out["nested_typo"], 400, "invalid_request")
    assert "version: expected a valid string" in repository_error(out["number"], 400, "invalid_request")
    assert "disagree" in repository_error(out["disagree"], 400, "invalid_request")
    assert "not valid JSON" in repository_error(out["not_json"], 400, "invalid_request")
    assert "its versions: ['1', '2']" in repository_error(out["unknown_version"], 404, "model_not_found")
    assert "parameters: expected an object" in repository_error(out["load_parameters"], 400, "invalid_request")
    assert "no config or files" in repository_error(out["load_config"], 400, "invalid_request")
    assert verify_versions(out["still"]) == ["1", "2"]  # nothing was unloaded


def test_a_canary_loaded_with_its_share_takes_no_more_than_it_from_its_first_request(versioned):
    """Version 2 appears on disk and is loaded as a canary with share 0 while requests keep
    coming: none of them runs on it, /v1/models and the index say who takes what; a share
    then sends requests to it, and ending the canary makes it the default."""
    parked = versioned / "fever" / ".2"
    shutil.move(versioned / "fever" / "2", parked)

    async def scenario():
        async with running_app(settings(versioned, model_control_mode="explicit")) as (app, client):
            answers, stop = [], asyncio.Event()

            async def keep_asking() -> None:
                while not stop.is_set():
                    answers.append(await client.post("/verify", json=VERIFY))

            senders = [asyncio.create_task(keep_asking()) for _ in range(4)]
            shutil.move(parked, versioned / "fever" / "2")
            out = {"load": await client.post(f"{REPO}/fever/load",
                                             json={"parameters": {"canary": {"version": "2", "share": 0}}})}
            await asyncio.sleep(0.3)
            stop.set()
            await asyncio.gather(*senders)
            out["during"] = answers
            out["models"] = (await client.get("/v1/models")).json()
            out["index"] = (await client.post("/v2/repository/index")).json()
            out["share"] = await client.post(f"{REPO}/fever/canary", json={"version": "2", "share": 1})
            out["all_canary"] = [await client.post("/verify", json=VERIFY) for _ in range(5)]
            out["end"] = await client.post(f"{REPO}/fever/canary", json={"version": None})
            out["ended"] = [await client.post("/verify", json=VERIFY) for _ in range(5)]
            out["models_after"] = (await client.get("/v1/models")).json()
            return out
    out = asyncio.run(scenario())
    assert out["load"].status_code == 200, out["load"].text
    assert len(out["during"]) > 10 and set(verify_versions(out["during"])) == {"1"}
    fever = next(m for m in out["models"]["models"] if m["name"] == "fever")
    assert fever["version"] == "1" and fever["canary"] == {"version": "2", "share": 0.0, "rest": "1"}
    assert [(v["version"], v["default"], v["traffic"]) for v in fever["versions"]] == \
        [("1", True, 1.0), ("2", False, 0.0)]
    assert {r["version"]: r["traffic"] for r in out["index"] if r["name"] == "fever"} == {"1": 1.0, "2": 0.0}
    assert out["share"].status_code == 200 and verify_versions(out["all_canary"]) == ["2"] * 5
    assert out["end"].status_code == 200 and verify_versions(out["ended"]) == ["2"] * 5
    fever = next(m for m in out["models_after"]["models"] if m["name"] == "fever")
    assert fever["canary"] is None and [(v["version"], v["default"]) for v in fever["versions"]] == \
        [("1", False), ("2", True)]


def test_a_canary_share_must_be_a_number_from_0_to_1_and_the_key_comes_first(versioned):
    key = "control-key-0123456789abcdef"

    async def scenario():
        async with running_app(settings(versioned, model_control_mode="explicit", api_keys="task-key-0123456789abcdef",
                                        control_api_keys=key)) as (app, client):
            auth = {"authorization": f"Bearer {key}"}
            out = {"no_key_bad_body": await client.post(f"{REPO}/fever/canary", json={"share": "x"})}
            for case, share in (("text", "0.5"), ("boolean", True), ("above", 1.5), ("negative", -0.1)):
                out[case] = await client.post(f"{REPO}/fever/canary", json={"version": "1", "share": share},
                                              headers=auth)
            out["unknown"] = await client.post(f"{REPO}/fever/canary", json={"version": "7", "share": 0.5},
                                               headers=auth)
            out["integer"] = await client.post(f"{REPO}/fever/canary", json={"version": "1", "share": 1}, headers=auth)
            return out
    out = asyncio.run(scenario())
    repository_error(out["no_key_bad_body"], 401, "unauthorized")
    for case in ("text", "boolean", "above", "negative"):
        assert repository_error(out[case], 400, "invalid_request").startswith("share: "), case
    assert "no version '7' loaded" in repository_error(out["unknown"], 404, "model_not_found")
    assert out["integer"].status_code == 200 and out["integer"].json()["share"] == 1


def test_unloading_a_pinned_default_leaves_no_default_named(versioned):
    async def scenario():
        async with running_app(settings(versioned, model_control_mode="explicit",
                                        default_verification_model="fever")) as (app, client):
            before = (await client.get("/v1/models")).json()["tasks"]["verification"]["default"]
            refused = await client.post(f"{REPO}/fever/unload")
            forced = await client.post(f"{REPO}/fever/unload", json={"force": True})
            return before, refused, forced, (await client.get("/v1/models")).json(), \
                await client.post("/verify", json=VERIFY)
    before, refused, forced, models, verify = asyncio.run(scenario())
    assert before == "fever"
    assert "verification would have no model" in repository_error(refused, 409, "would_remove_default")
    assert forced.status_code == 200 and models["tasks"]["verification"]["default"] is None
    assert verify.status_code == 404 and verify.json()["error"]["code"] == "no_model_for_task"


def test_explicit_mode_without_control_keys_warns_at_start(versioned, caplog):
    async def scenario(**over):
        async with running_app(settings(versioned, model_control_mode="explicit", **over), wait_loaded=False):
            pass
    with caplog.at_level(logging.WARNING, logger="service.inference.model_control"):
        asyncio.run(scenario())
        open_warnings = [r for r in caplog.records if "ATTSERVE_CONTROL_API_KEYS" in r.getMessage()]
        caplog.clear()
        asyncio.run(scenario(control_api_keys="control-key-0123456789abcdef"))
        keyed_warnings = [r for r in caplog.records if "ATTSERVE_CONTROL_API_KEYS" in r.getMessage()]
    assert len(open_warnings) == 1 and open_warnings[0].levelno == logging.WARNING and not keyed_warnings


def test_a_request_naming_a_version_that_reloads_meanwhile_follows_the_new_load(versioned):
    """A reload must hand a request that already resolved the old load (and named its version)
    to the new one: without `replaced_by` it would be a 422."""
    import os

    from service.inference.dataplane import current_load

    async def scenario():
        async with running_app(settings(versioned, model_control_mode="explicit")) as (app, client):
            service = app.state.service
            resolved = service.resolve("fever", "verification", "1")
            os.utime(versioned / "fever" / "1" / "config.json", (1, 3))  # version 1 changed on disk
            assert (await client.post(f"{REPO}/fever/load")).status_code == 200
            return resolved, current_load(service, resolved, "1"), service.versions["fever"]["1"]
    resolved, follows, now = asyncio.run(scenario())
    assert resolved.retired and follows is now and not follows.retired and follows is not resolved


def test_unloading_and_loading_one_version_under_traffic_answers_no_5xx(versioned):
    """Version 1 is unloaded and loaded again while requests keep coming, some naming it: a
    request naming no version always gets an answer, one naming version 1 an answer or a 422."""
    async def scenario():
        async with running_app(settings(versioned, model_control_mode="explicit")) as (app, client):
            named, unnamed, stop = [], [], asyncio.Event()

            async def keep_asking(version: str | None, answers: list) -> None:
                while not stop.is_set():
                    body = {**VERIFY, "version": version} if version else VERIFY
                    answers.append(await client.post("/verify", json=body))
                    await asyncio.sleep(0)  # a 422 answers in process without ever yielding to the loop

            senders = [asyncio.create_task(keep_asking(v, named if v else unnamed)) for v in ("1", None) * 3]
            controls = []
            for round_ in range(6):
                if round_ % 2 == 0:
                    controls.append(await client.post(f"{REPO}/fever/unload", json={"version": "1"}))
                else:
                    controls.append(await client.post(f"{REPO}/fever/load"))
                await asyncio.sleep(0.05)
            stop.set()
            await asyncio.gather(*senders)
            return controls, named, unnamed
    controls, named, unnamed = asyncio.run(scenario())
    assert [c.status_code for c in controls] == [200] * 6, [c.text for c in controls]
    assert len(unnamed) > 20 and set(verify_versions(unnamed)) == {"2"}
    assert {a.status_code for a in named} <= {200, 422} and any(a.status_code == 200 for a in named)
    assert {a.json()["error"]["code"] for a in named if a.status_code == 422} <= {"unknown_model"}


# --- the workers' control log -------------------------------------------------------------------

def with_log(app, tmp_path, expected: int = 1):
    """Make `app`'s model control go through a workers' log in `tmp_path` (as with
    ATTSERVE_WORKERS), with `expected` workers to wait for."""
    control = app.state.model_control
    control._log_dir = tmp_path / "control"
    control._log_dir.mkdir()
    control._group = SimpleNamespace(expected=expected)
    return control._log_dir


def test_a_bad_entry_of_the_workers_log_is_passed_and_counted_not_waited_on(versioned, tmp_path, monkeypatch):
    monkeypatch.setattr(model_control, "WORKERS_WAIT_S", 2.0)  # the old wedge answered after this

    async def scenario():
        async with running_app(settings(versioned, model_control_mode="explicit")) as (app, client):
            log_dir = with_log(app, tmp_path)
            (log_dir / "00000001.json").write_text("")  # a worker killed between creating and writing it
            (log_dir / "00000002.json").write_text('{"action": "canary", "name": "fever", "version": "1", '
                                                   '"share": "x"}')
            out = {"canary": await client.post(f"{REPO}/fever/canary", json={"version": "1", "share": 1.0})}
            out["answers"] = [await client.post("/verify", json=VERIFY) for _ in range(5)]
            out["next"] = await client.post(f"{REPO}/fever/canary", json={"version": None})
            out["after"] = [await client.post("/verify", json=VERIFY) for _ in range(5)]
            out["metrics"] = (await client.get("/metrics")).text
            out["log"] = sorted(p.name for p in log_dir.iterdir())
            return out
    out = asyncio.run(scenario())
    assert out["canary"].status_code == 200 and verify_versions(out["answers"]) == ["1"] * 5
    assert out["next"].status_code == 200 and verify_versions(out["after"]) == ["2"] * 5
    skipped = metric_samples(out["metrics"], "attserve_model_control_log_skipped_total")
    assert skipped == {(("reason", "unreadable"),): 2}
    # the entries this worker wrote are whole, under the next numbers; no staging file is left
    assert [n for n in out["log"] if n.endswith(".json")] == [f"{n:08d}.json" for n in range(1, 5)]
    assert not [n for n in out["log"] if n.startswith(".")]


def test_a_change_not_every_worker_applied_in_time_is_no_200(versioned, tmp_path, monkeypatch):
    monkeypatch.setattr(model_control, "WORKERS_WAIT_S", 0.5)

    async def scenario():
        async with running_app(settings(versioned, model_control_mode="explicit")) as (app, client):
            with_log(app, tmp_path, expected=2)  # a second worker that never applies anything
            return await client.post(f"{REPO}/fever/canary", json={"version": "1", "share": 0.5})
    message = repository_error(asyncio.run(scenario()), 504, "change_not_applied")
    assert "1 of 2 workers did not apply the change" in message
