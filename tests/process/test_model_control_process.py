"""Explicit model control under the real `python -m service` with two workers, driven by
Triton's own client (`tritonclient[http]`): the repository index, unload and load, and every
worker in step after each call (a fresh connection may reach either worker)."""

from __future__ import annotations

import shutil

import httpx
import pytest

from bench.harness import ServiceProcess

tritonclient_http = pytest.importorskip("tritonclient.http")
from tritonclient.utils import InferenceServerException  # noqa: E402

pytestmark = pytest.mark.timeout(300)

VERIFY = {"claim": "a dog runs", "evidence": ["a dog runs fast"]}


def fresh_connections(base: str, count: int = 8) -> list[httpx.Response]:
    """`/v1/models` over `count` new connections: the kernel spreads them over the workers."""
    out = []
    for _ in range(count):
        with httpx.Client(base_url=base, timeout=10) as client:
            out.append(client.get("/v1/models"))
    return out


def test_tritonclient_drives_explicit_mode_and_both_workers_follow(service_bundles, tmp_path):
    repo = tmp_path / "repository"
    for version in ("1", "2"):
        shutil.copytree(service_bundles / "fever", repo / "fever" / version)
    shutil.copytree(service_bundles / "nli", repo / "nli")
    server = ServiceProcess(repo, tmp_path / "service.log", workers=2, model_control_mode="explicit")
    with server.start():
        client = tritonclient_http.InferenceServerClient(url=f"127.0.0.1:{server.port}")
        index = client.get_model_repository_index()
        assert {(m["name"], m["version"], m["state"]) for m in index} == {
            ("fever", "1", "READY"), ("fever", "2", "READY"), ("nli", "test-1", "READY")}
        assert client.is_model_ready("fever", "1") and client.is_model_ready("fever")

        r = httpx.post(server.base + "/v2/repository/models/fever/unload", json={"version": "1"}, timeout=60)
        assert r.status_code == 200, r.text
        for answer in fresh_connections(server.base):  # both workers unloaded version 1 only
            fever = next(m for m in answer.json()["models"] if m["name"] == "fever")
            assert [v["version"] for v in fever["versions"]] == ["2"]

        # fever is the verification default: tritonclient hears the refusal (the protocol's string)
        with pytest.raises(InferenceServerException, match='"force": true'):
            client.unload_model("fever")
        r = httpx.post(server.base + "/v2/repository/models/fever/unload", json={"force": True}, timeout=60)
        assert r.status_code == 200, r.text
        for answer in fresh_connections(server.base):
            assert "fever" not in {m["name"] for m in answer.json()["models"]}
        assert not client.is_model_ready("fever")
        assert {(m["name"], m["state"], m["reason"]) for m in client.get_model_repository_index()
                if m["name"] == "fever"} == {("fever", "UNAVAILABLE", "unloaded")}

        # every worker (fresh connections): verification lost its model
        ready = [httpx.get(server.base + "/health/ready", timeout=10) for _ in range(4)]
        assert {r.status_code for r in ready} == {503} and "verification" in ready[0].json()["error"]["message"]

        shutil.rmtree(repo / "fever" / "2")
        client.load_model("fever")
        for answer in fresh_connections(server.base):
            fever = next(m for m in answer.json()["models"] if m["name"] == "fever")
            assert [v["version"] for v in fever["versions"]] == ["1"]
        r = httpx.post(server.base + "/verify", json=VERIFY, timeout=10)
        assert r.status_code == 200 and r.headers["x-attserve-model-version"] == "1"

        with pytest.raises(InferenceServerException, match="no bundle of model 'nothing'"):
            client.load_model("nothing")
        with pytest.raises(InferenceServerException, match="takes no config or files"):
            client.load_model("fever", config='{"backend": "python"}')
        assert httpx.get(server.base + "/health/ready", timeout=10).status_code == 200
