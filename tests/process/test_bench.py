"""`attserve bench` short mode end to end (tiny model, real SNLI test bodies, wrk, taskset), and
the pure pieces of the benchmark: the /metrics split and the open-loop generator's accounting.
No timing assertions: the figures themselves depend on the machine."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

needs_wrk = pytest.mark.skipif(shutil.which("wrk") is None,
                               reason="wrk is not installed (CI installs it with bench/ci-deps.sh)")

RUN_FIELDS = {"loop", "concurrency", "requests", "items", "duration_s", "requests_per_s", "items_per_s",
              "latency_ms", "errors"}
LATENCY_FIELDS = {"p50", "p90", "p95", "p99", "max", "mean"}
ERROR_FIELDS = {"connect", "read", "write", "status", "timeout", "total"}
SPLIT_FIELDS = {"items", "batches", "mean_batch_size", "queue_wait_ms_mean", "inference_ms_mean_per_batch",
                "queue_share"}
TOP_FIELDS = {"schema_version", "mode", "command", "started_at", "finished_at", "wall_s", "machine", "versions",
              "settings", "workloads", "skipped_workloads", "primary_workload", "engine_ceiling", "engine_requests",
              "ort_vs_torch", "service", "http_floor", "naive", "peer", "knobs", "profile", "act_vs_transformer", "ratios"}
RATIOS = {"service_single_vs_engine", "service_batch32_vs_engine", "service_single_vs_engine_requests",
          "service_batch32_vs_engine_requests", "service_vs_http_floor", "service_vs_naive",
          "service_vs_peer", "p99_open50_vs_p50_c1", "ort_vs_torch_batch1", "ort_vs_torch_batch32",
          "act_vs_transformer_params", "act_vs_transformer_speed"}


def check_runs(runs: list[dict], concurrencies: list[int], split: bool, where: str) -> None:
    assert [r["concurrency"] for r in runs] == concurrencies, where
    for run in runs:
        assert RUN_FIELDS <= set(run), (where, RUN_FIELDS - set(run))
        assert LATENCY_FIELDS <= set(run["latency_ms"]), where
        assert ERROR_FIELDS <= set(run["errors"]), where
        assert run["requests"] > 0 and run["errors"]["total"] == 0, (where, run)
        assert run["latency_ms"]["p50"] <= run["latency_ms"]["p99"] <= run["latency_ms"]["max"], (where, run)
        if split:
            assert SPLIT_FIELDS <= set(run["server_split"]), where
            # every item the generator got an answer for went through a batch the server timed
            assert run["server_split"]["items"] >= run["items"], (where, run)
            assert run["server_split"]["mean_batch_size"] >= 1, (where, run["server_split"])


@pytest.fixture(scope="module")
def short_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("bench") / "results"
    work = out.parent / "work"
    proc = subprocess.run([sys.executable, "-m", "cli.main", "bench", "--mode", "short", "--out", str(out),
                           "--work", str(work)], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout.strip().endswith("results.json")
    return out


@needs_wrk
@pytest.mark.timeout(600)
def test_short_mode_writes_every_field(short_run: Path) -> None:
    r = json.loads((short_run / "results.json").read_text())
    assert TOP_FIELDS <= set(r), TOP_FIELDS - set(r)
    assert r["mode"] == "short"
    assert {"cpu_model", "cpu_count", "cpus_available", "memory_gib", "platform", "python", "load_average_start",
            "load_average_end"} <= set(r["machine"])
    for package in ("onnxruntime", "torch", "fastapi", "uvicorn", "wrk"):
        assert r["versions"][package], package
    settings = r["settings"]
    concurrencies = settings["concurrencies"]
    assert settings["ratio_concurrency"] in concurrencies
    name = r["primary_workload"]
    assert r["workloads"][name]["examples"] > 0 and r["workloads"][name]["task"] == "entailment"

    ceiling = r["engine_ceiling"][name]
    for where in ("pinned", "unpinned"):
        assert sorted(int(b) for b in ceiling[where]) == settings["batch_sizes"]
        assert all(x["items_per_s"] > 0 and x["items"] > 0 for x in ceiling[where].values())

    requests = r["engine_requests"][name]
    for form in ("single", "batch32"):
        runs = requests[form]
        assert [x["concurrency"] for x in runs] == concurrencies, form
        assert all(x["items_per_s"] > 0 and 0 < x["p50_ms"] <= x["p99_ms"] for x in runs), form
        # every request's items ran: 32 a request, and a batch never over max_batch_size
        want = 32 if form == "batch32" else 1
        assert all(x["items_per_s"] == pytest.approx(want * x["requests_per_s"], rel=1e-3) for x in runs), form
        assert all(1 <= x["mean_batch_size"] <= settings["service"]["max_batch_size"] for x in runs), form
    assert requests["single"][0]["mean_batch_size"] == 1.0  # one caller: nothing to batch with

    service = r["service"][name]
    check_runs(service["single"]["pinned"], concurrencies, split=True, where="service single pinned")
    check_runs(service["single"]["unpinned"], concurrencies, split=True, where="service single unpinned")
    check_runs(service["batch32"]["pinned"], concurrencies, split=True, where="service batch32")
    for run in service["batch32"]["pinned"]:
        assert run["items"] == 32 * run["requests"]
    assert [x["fraction_of_saturation"] for x in service["open_loop"]] == settings["open_loop_fractions"]
    for run in service["open_loop"]:
        assert run["loop"] == "open" and run["target_rate"] > 0
        assert {"scheduled", "unsent", "late_sends", "server_split"} <= set(run)
        assert run["requests"] + run["unsent"] == run["scheduled"] and run["errors"]["total"] == 0
    check_runs(r["http_floor"]["pinned"], concurrencies, split=False, where="floor")
    assert r["naive"]["status"] == "ok"
    check_runs(r["naive"]["pinned"], concurrencies, split=False, where="naive")
    assert r["peer"]["status"] == "skipped" and r["peer"]["reason"]
    assert r["knobs"]["status"] == "skipped" and r["profile"]["status"] == "skipped"

    compare = r["ort_vs_torch"][name]
    assert sorted(int(b) for b in compare) == settings["compare_batch_sizes"]
    for x in compare.values():
        assert x["onnxruntime"]["median_ms"] > 0 and x["torch_eager"]["median_ms"] > 0
        assert x["max_abs_logit_diff"] < 1e-3  # the same network on the same ids
    act = r["act_vs_transformer"]
    # the paper's Table 5 parameter counts (1.49M / 3.38M) are a property of the settings
    assert abs(act["act"]["parameters_without_word_embeddings"] - 1.49e6) / 1.49e6 < 0.02
    assert act["act"]["median_ms"] > 0 and act["transformer"]["median_ms"] > 0

    assert set(r["ratios"]) == RATIOS
    for key, x in r["ratios"].items():
        assert {"value", "target", "met", "definition"} <= set(x), key
        if key == "service_vs_peer":
            assert x["value"] is None and x["met"] is None  # no peer in short mode
        else:
            assert isinstance(x["value"], float) and math.isfinite(x["value"]) and x["value"] > 0, key
            assert (x["met"] is None) == (x["target"] is None), key


@needs_wrk
@pytest.mark.timeout(600)
def test_short_mode_writes_table_and_plots(short_run: Path) -> None:
    table = (short_run / "results.md").read_text()
    for heading in ("## Ratios", "## Engine ceiling", "## Load runs", "## onnxruntime vs PyTorch eager",
                    "## ACT vs Transformer", "## Knobs", "## Profile"):
        assert heading in table
    assert "service_vs_naive" in table and "HTTP floor" in table and "naive PyTorch" in table
    for plot in ("throughput.png", "p99.png"):
        data = (short_run / plot).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000, plot
    assert not (short_run / "knobs.png").exists()  # no knob sweep in short mode


# --- pure pieces ------------------------------------------------------------------------------

METRICS_BEFORE = """
# TYPE attserve_queue_wait_seconds histogram
attserve_queue_wait_seconds_count{model="m"} 10.0
attserve_queue_wait_seconds_sum{model="m"} 0.05
# TYPE attserve_inference_duration_seconds histogram
attserve_inference_duration_seconds_count{model="m"} 5.0
attserve_inference_duration_seconds_sum{model="m"} 0.01
# TYPE attserve_batch_size histogram
attserve_batch_size_count{model="m"} 5.0
attserve_batch_size_sum{model="m"} 10.0
"""
METRICS_AFTER = """
# TYPE attserve_queue_wait_seconds histogram
attserve_queue_wait_seconds_count{model="m"} 110.0
attserve_queue_wait_seconds_sum{model="m"} 0.35
attserve_queue_wait_seconds_count{model="other"} 7.0
attserve_queue_wait_seconds_sum{model="other"} 0.07
# TYPE attserve_inference_duration_seconds histogram
attserve_inference_duration_seconds_count{model="m"} 30.0
attserve_inference_duration_seconds_sum{model="m"} 0.11
# TYPE attserve_batch_size histogram
attserve_batch_size_count{model="m"} 30.0
attserve_batch_size_sum{model="m"} 110.0
"""


def test_metrics_split_is_the_delta_between_scrapes() -> None:
    from bench.servers import metric_totals, metrics_split

    split = metrics_split(metric_totals(METRICS_BEFORE), metric_totals(METRICS_AFTER))
    # 107 new items (100 + 7 of another model) waited 0.37 s in all; 25 batches took 0.1 s
    assert split["items"] == 107 and split["batches"] == 25
    assert split["queue_wait_ms_mean"] == pytest.approx(1000 * 0.37 / 107, abs=1e-3)
    assert split["inference_ms_mean_per_batch"] == pytest.approx(4.0, abs=1e-3)
    assert split["mean_batch_size"] == pytest.approx(4.0)
    assert 0 < split["queue_share"] < 1


def test_committed_ratios_follow_from_their_own_runs() -> None:
    """bench-results/results.json, the run the README quotes: every ratio is recomputed here
    from the runs recorded in the same file (a ratio with numerator and denominator swapped, taken
    at the wrong concurrency or batch size, or left stale after the runs were redone breaks this),
    and every run a ratio uses answered every request with a 2xx (errors would otherwise count
    as throughput)."""
    r = json.loads((REPO / "bench-results" / "results.json").read_text())
    name, c = r["primary_workload"], r["settings"]["ratio_concurrency"]
    service, ceiling = r["service"][name], r["engine_ceiling"][name]["pinned"]
    single, batch = service["single"]["pinned"], service["batch32"]["pinned"]
    floor, naive, peer = r["http_floor"]["pinned"], r["naive"]["pinned"], r["peer"]["pinned"]

    def at(runs: list[dict], concurrency: int) -> dict:
        (run,) = [x for x in runs if x["concurrency"] == concurrency]
        return run

    def best(runs: list[dict], key: str) -> float:
        return max(x[key] for x in runs)

    open50 = next(x for x in service["open_loop"] if x["fraction_of_saturation"] == 0.5)
    compare, act = r["ort_vs_torch"][name], r["act_vs_transformer"]
    want = {
        "service_single_vs_engine": best(single, "items_per_s") / ceiling[str(r["settings"]["service"]["max_batch_size"])]["items_per_s"],
        "service_batch32_vs_engine": best(batch, "items_per_s") / ceiling["32"]["items_per_s"],
        "service_single_vs_engine_requests": best(single, "items_per_s")
        / best(r["engine_requests"][name]["single"], "items_per_s"),
        "service_batch32_vs_engine_requests": best(batch, "items_per_s")
        / best(r["engine_requests"][name]["batch32"], "items_per_s"),
        "service_vs_http_floor": best(single, "requests_per_s") / best(floor, "requests_per_s"),
        "service_vs_naive": at(single, c)["requests_per_s"] / at(naive, c)["requests_per_s"],
        "service_vs_peer": at(single, c)["requests_per_s"] / at(peer, c)["requests_per_s"],
        "p99_open50_vs_p50_c1": open50["latency_ms"]["p99"] / at(single, 1)["latency_ms"]["p50"],
        "ort_vs_torch_batch1": compare["1"]["torch_eager"]["median_ms"] / compare["1"]["onnxruntime"]["median_ms"],
        "ort_vs_torch_batch32": compare["32"]["torch_eager"]["median_ms"] / compare["32"]["onnxruntime"]["median_ms"],
        "act_vs_transformer_params": act["act"]["parameters_without_word_embeddings"]
        / act["transformer"]["parameters_without_word_embeddings"],
        "act_vs_transformer_speed": act["transformer"]["median_ms"] / act["act"]["median_ms"],
    }
    assert set(want) == set(r["ratios"])
    for key, value in want.items():
        assert r["ratios"][key]["value"] == pytest.approx(value, abs=5.1e-4), (key, r["ratios"][key], value)
    for where, runs in (("single", single), ("batch32", batch), ("floor", floor), ("naive", naive), ("peer", peer),
                        ("open loop", service["open_loop"])):
        for run in runs:
            assert run["requests"] > 0 and run["errors"]["total"] == 0 and run["errors"]["status"] == 0, (where, run)
    assert r["naive"]["status"] == r["peer"]["status"] == "ok"
    assert c in [x["concurrency"] for x in single]


def test_ratio_targets() -> None:
    from bench.suite import _ratio

    assert _ratio(9.0, 10.0, ">= 0.9", "")["met"] is True
    assert _ratio(8.9, 10.0, ">= 0.9", "")["met"] is False
    assert _ratio(3.1, 1.0, "<= 3", "")["met"] is False
    assert _ratio(1.0, 1.0, "> 1", "")["met"] is False
    assert _ratio(None, 1.0, "> 1", "") == {"value": None, "target": "> 1", "met": None, "definition": ""}


def test_profile_summary_shares() -> None:
    from bench.profile import summarize

    raw = "\n".join([
        ("thread (11): MainThread;run (uvicorn/server.py:86);_predict (service/http/routes.py:150);"
         "encode (core/tokenization.py:60) 6"),
        "thread (11): MainThread;run (uvicorn/server.py:86);app (starlette/routing.py:70) 2",
        ("thread (12): ort-m_0;_worker (concurrent/futures/thread.py:80);run "
         "(onnxruntime/capi/onnxruntime_inference_collection.py:266) 12"),
    ])
    out = summarize(raw)
    assert out["samples"] == 20
    assert out["threads"] == {"ort-m_0": 0.6, "MainThread": 0.4}
    layers = out["layers_inclusive"]
    assert layers["onnxruntime session.run"] == 0.6 and layers["uvicorn + httptools"] == 0.4
    assert layers["tokenizers"] == 0.3 and layers["service routes (validate, encode, answer)"] == 0.3
    assert layers["fastapi + starlette"] == 0.1 and "pydantic" not in layers
    assert list(out["top_self"]) == ["run (onnxruntime_inference_collection.py)", "encode (tokenization.py)",
                                     "app (routing.py)"]


def test_open_loop_counts_latency_from_the_due_time() -> None:
    """A server that answers each request after 50 ms on ONE connection, offered 100 requests/s
    for 0.5 s: a closed loop would see 50 ms every time; the open loop must see the queue
    build up (each request due 10 ms after the previous one but served 50 ms after it)."""
    import asyncio

    from bench.loadgen import _run

    async def scenario() -> dict:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except asyncio.IncompleteReadError:
                    return
                length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                                  if line.lower().startswith(b"content-length")))
                await reader.readexactly(length)
                await asyncio.sleep(0.05)
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
                await writer.drain()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            return await _run(f"http://127.0.0.1:{port}/x", [b"{}"], rate=100, duration_s=0.5,
                              connections=1, timeout_s=5)

    result = asyncio.run(scenario())
    assert result["scheduled"] == 50 and result["requests"] + result["unsent"] == 50
    assert result["errors"]["status"] == 0 and result["late_sends"] > 0
    # the last requests waited behind the earlier ones: far beyond the 50 ms service time
    assert result["latency_us"]["max"] > 5 * 50_000
    assert result["latency_us"]["p50"] > 50_000
