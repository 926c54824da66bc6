"""bench.peers' summary logic on made-up runs (no servers, no load generator)."""

from __future__ import annotations

import pytest

from bench.peers import is_failed, markdown, pick_best, summarize


def run(arm: str, items: float, p99: float = 10.0, errors: int = 0, **extra) -> dict:
    r = {"arm": arm, "items_per_s": items, "latency_ms": {"p50": p99 / 2, "p99": p99},
         "errors": {"total": errors}, "setting": extra.pop("setting", {}), "load_1m": 1.0, "round": 0, **extra}
    r["failed"] = is_failed(r)
    return r


def test_is_failed_on_errors_and_start_failures():
    assert not is_failed({"errors": {"total": 0}})
    assert is_failed({"errors": {"total": 3}})
    assert is_failed({"error": "peer exited 1 at start-up"})


def test_failed_runs_are_left_out_of_medians_and_ratio_spread():
    runs = [run("service", 100), run("service", 120), run("service", 110),
            run("peer", 50, p99=40), run("peer", 40, p99=20), run("peer", 45, p99=30),
            run("peer", 900, p99=1, errors=7)]  # fast but with errors: never counted
    s = summarize(runs, ["service", "peer"])
    assert s["peer"]["runs_ok"] == 3 and s["peer"]["runs_failed"] == 1
    assert s["peer"]["median_items_per_s"] == 45
    assert (s["peer"]["min"], s["peer"]["max"]) == (40, 50)
    assert s["peer"]["median_p99_ms"] == 30
    assert s["service"]["median_items_per_s"] == 110
    assert s["peer"]["ratio"] == pytest.approx(110 / 45, abs=1e-3)
    assert s["peer"]["ratio_low"] == pytest.approx(100 / 50, abs=1e-3)  # service min / peer max
    assert s["peer"]["ratio_high"] == pytest.approx(120 / 40, abs=1e-3)  # service max / peer min
    assert s["service"]["ratio"] == 1.0


def test_an_arm_whose_runs_all_failed_has_no_median_or_ratio():
    s = summarize([run("service", 100), run("peer", 10, errors=1)], ["service", "peer"])
    assert s["peer"]["median_items_per_s"] is None and s["peer"]["ratio"] is None
    assert s["peer"]["ratio_low"] is None and s["peer"]["ratio_high"] is None


def test_without_the_service_arm_there_is_no_ratio():
    s = summarize([run("peer", 10)], ["peer"])
    assert s["peer"]["median_items_per_s"] == 10 and s["peer"]["ratio"] is None


def test_best_setting_skips_failed_runs():
    tried = [run("peer", 300, setting={"max_batch_size": 32}, errors=2),
             run("peer", 200, setting={"max_batch_size": 8}),
             run("peer", 250, setting={"max_batch_size": 16})]
    assert pick_best(tried)["setting"] == {"max_batch_size": 16}
    assert pick_best([run("peer", 300, errors=1), {"arm": "peer", "error": "no start", "failed": True}]) is None


def test_markdown_lists_every_arm():
    runs = [run("service", 100), run("peer", 50)]
    report = {"command": "python -m bench.peers", "finished_at": "t", "machine": "m", "model": "x",
              "concurrency": 32, "rounds": 1, "duration_s": 10, "warmup_s": 2, "wall_s": 1.0,
              "arms": {"service": {"setting": {}, "versions": "v"}, "peer": {"setting": {"b": 8}, "versions": "p==1"}},
              "summary": summarize(runs, ["service", "peer"]), "sweep_runs": [], "runs": runs, "dropped": {}}
    text = markdown(report)
    assert "| peer | b=8 | p==1 | 1/1 | 50" in text and "| service |" in text


def test_ab_arms_name_a_tree_a_body_file_and_an_app():
    import typer

    from bench.ab import APPS, _arm

    label, root, bodies, app = _arm("floor=.:single:minus-model")
    assert (label, bodies, app) == ("floor", "single", "minus-model") and root.is_absolute()
    assert _arm("after=.:explain")[3] == "service"
    assert set(APPS) == {"service", "minus-model", "http-floor", "naive-ort", "raw-session"}
    assert _arm("raw=.:batch:raw-session")[3] == "raw-session"  # onnxruntime alone on the same bodies
    assert _arm("big=.:batch")[2] == "batch"  # 32 inputs per request
    assert _arm("naive=.:single:naive-ort")[3] == "naive-ort"  # the unbatched FastAPI + onnxruntime server
    for bad in ("x=.:pairs", "x=.:single:torch", "=.:single", "x="):
        with pytest.raises(typer.BadParameter):
            _arm(bad)


def test_the_two_core_arms_run_two_processes_unpinned_and_compare_with_each_other(tmp_path):
    from bench.peers import ARMS

    workers, ray = ARMS["service-2w"], ARMS["ray-2r"]
    assert not workers.pinned and not ray.pinned and ARMS["service"].pinned and ARMS["ray"].pinned
    spec = workers.spec(8123, tmp_path / "bundle", workers.sweep[0])
    assert spec.env["ATTSERVE_WORKERS"] == "2" and spec.env["ATTSERVE_PORT"] == "8123"
    assert spec.argv[1:] == ["-m", "service"]  # the supervisor of service.process.workers, as `attserve serve` runs it
    assert ray.spec(8123, tmp_path / "bundle", ray.sweep[0]).env["BENCH_PEER_REPLICAS"] == "2"
    assert ARMS["ray"].spec(8123, tmp_path / "bundle", ARMS["ray"].sweep[0]).env["BENCH_PEER_REPLICAS"] == "1"
    s = summarize([run("service-2w", 300), run("ray-2r", 100)], ["service-2w", "ray-2r"], base="service-2w")
    assert s["ray-2r"]["ratio"] == 3.0


def test_the_plot_is_written_and_closed_with_a_failed_arm_left_out(tmp_path):
    from bench.peers import plot

    runs = [run("service", 100, p99=10), run("service", 120, p99=12), run("peer", 50, p99=40),
            run("broken", 10, errors=1)]
    report = {"model": "x", "concurrency": 32, "rounds": 2, "finished_at": "2026-11-25T12:00:00Z",
              "summary": summarize(runs, ["service", "peer", "broken"])}
    path = plot(report, tmp_path / "peers.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 5000
    import matplotlib.pyplot as plt  # the figure was closed, not left open
    assert not plt.get_fignums()


def test_an_arm_label_names_an_arm_and_optionally_its_own_model():
    from bench.peers import parse_arm

    assert parse_arm("service") == ("service", None)
    assert parse_arm("service@snli-attconv-light") == ("service", "snli-attconv-light")
    assert parse_arm("hf-pipeline") == ("hf-pipeline", None)
    for bad in ("servise", "service@", "@snli-attconv-light"):
        with pytest.raises(ValueError, match="unknown arm"):
            parse_arm(bad)


def test_the_batch_shape_sends_32_input_bodies_and_drops_one_input_peers():
    from bench.peers import ARMS, SHAPES, body_file_of

    assert SHAPES == {"single": 1, "batch": 32}
    assert body_file_of(ARMS["service"], "single") == "single"
    assert body_file_of(ARMS["hf-ort"], "batch") == "batch"
    assert body_file_of(ARMS["bento"], "single") == "peer"
    assert body_file_of(ARMS["bento"], "batch") is None  # its body holds one input


def test_usable_arms_keep_their_label_its_arm_and_the_shape_body():
    from bench.peers import _usable_arms

    arms, dropped = _usable_arms(["service", "service@snli-attconv-light", "hf-ort"], "batch")
    assert list(arms) == ["service", "service@snli-attconv-light", "hf-ort"]
    assert arms["service@snli-attconv-light"]["arm"] == "service" and arms["hf-ort"]["bodies"] == "batch"
    assert "onnxruntime " in arms["hf-ort"]["versions"] and not dropped


def test_a_model_is_a_bundle_name_or_a_path(tmp_path):
    from bench.peers import resolve_bundle
    from bench.servers import REPO

    assert resolve_bundle("snli-attconv-light") == REPO / "model_repository" / "snli-attconv-light"
    assert resolve_bundle(str(tmp_path / "minilm-l6")) == tmp_path / "minilm-l6"


def test_the_markdown_says_what_a_request_holds_and_what_each_arm_served():
    runs = [run("service", 100), run("hf-ort", 50)]
    report = {"command": "python -m bench.peers --shape batch", "finished_at": "t", "machine": "m", "model": "x",
              "concurrency": 4, "rounds": 1, "duration_s": 10, "warmup_s": 2, "wall_s": 1.0, "items_per_request": 32,
              "arms": {"service": {"setting": {}, "versions": "v", "target": "/b/minilm"},
                       "hf-ort": {"setting": {}, "versions": "o", "target": "/b/minilm"}},
              "summary": summarize(runs, ["service", "hf-ort"]), "sweep_runs": [], "runs": runs, "dropped": {}}
    text = markdown(report)
    assert "32 inputs a request" in text and "hf-ort: `/b/minilm`" in text


def test_the_transformer_peers_answer_as_the_service_alone_and_batched(tmp_path):
    """bench.transformer_shapes' export path at a tiny size: the FastAPI + onnxruntime peer and
    the transformers pipeline peer score each pair as the service's runtime does."""
    pytest.importorskip("transformers")
    pytest.importorskip("torch")
    from types import SimpleNamespace

    from bench.hf_ort_app import HfOnnxModel
    from bench.hf_pipeline_app import PipelineModel
    from bench.transformer_shapes import save_and_export, train_tokenizer
    from export.import_hf import build_config, served_scores, write_import
    from service.inference.runtime import CPU, ModelRuntime
    from tests.hf_models import CORPUS

    pairs = [("a man is playing a guitar on the stage .", "a person is making music ."),
             ("the cat sleeps .", "nobody is in the kitchen ."), ("two dogs run across the snowy field .", "dogs run")]
    tok = train_tokenizer([SimpleNamespace(premise=a, hypothesis=b) for a, b in zip(CORPUS, CORPUS[1:])])
    source = save_and_export(tmp_path / "hf" / "tiny", {"num_hidden_layers": 2, "hidden_size": 32,
                                                        "num_attention_heads": 2, "intermediate_size": 48}, tok)
    bundle = tmp_path / "repository" / "tiny"
    write_import(*build_config(source, "entailment", "tiny", None, None), bundle)
    runtime = ModelRuntime.load(bundle, [CPU], 1)
    alone, together = served_scores(runtime, pairs)  # (n, 3) in the bundle's label order
    expected = [dict(zip(runtime.config.labels, row)) for row in alone]
    assert max(abs(alone - together).ravel()) < 1e-5
    inputs = [{"premise": a, "hypothesis": b} for a, b in pairs]
    for peer in (HfOnnxModel(bundle), PipelineModel(str(source))):
        batched = peer.predict(inputs)
        single = [peer.predict([x])[0] for x in inputs]
        for answers in (batched, single):
            for answer, want in zip(answers, expected, strict=True):
                assert answer["scores"].keys() == want.keys()
                assert all(abs(answer["scores"][k] - want[k]) < 1e-5 for k in want), (type(peer).__name__, answer)
    # and the peers' one app (bench.hf_ort_app.entailment_app; the pipeline peer's too, not built
    # here a second time: torch sets its thread counts once a process) answers both request forms
    from fastapi.testclient import TestClient

    import bench.hf_ort_app as ort_app

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("BENCH_HF_BUNDLE", str(bundle))
        patch.setattr(ort_app, "freeze_gc", lambda: None)  # a server's start-up, not this test process's
        client = TestClient(ort_app.create_app())
    one = client.post("/entailment", json=inputs[0]).json()
    many = client.post("/entailment", json={"inputs": inputs}).json()["results"]
    for answer, want in zip([one, *many], [expected[0], *expected], strict=True):
        assert all(abs(answer["scores"][k] - want[k]) < 1e-5 for k in want), answer
