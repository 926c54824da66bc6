"""The README's "Train and serve your own model", end to end on examples/own-data:
CSV -> `attserve train` (a tiny model, seconds on CPU) -> `attserve export` -> served beside a
bundled model from a second repository -> the answer names its label."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from tests.bundles import running_app
from cli.main import app
from service.settings import DEFAULT_MODEL_REPOSITORY, Settings

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "own-data"


def test_readme_shows_the_commands_this_test_runs():
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Train and serve your own model"):]
    section = section[:section.index("\n## ", 3)]
    assert "attserve train examples/own-data/recipe.toml --out checkpoints/support-tickets" in section
    assert "attserve export checkpoints/support-tickets --out my-models/support-tickets" in section
    assert "ATTSERVE_MODEL_REPOSITORY=my-models,model_repository" in section
    for fmt in ("text-csv", "text-jsonl", "snli-jsonl", "snli-txt", "fever-jsonl"):
        assert f"`{fmt}`" in section, fmt


def test_own_data_trains_exports_and_serves_beside_a_bundled_model(tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.delenv("COLUMNS")  # restored after the test: the CLI sets it when output is piped
    runner = CliRunner()
    checkpoint = tmp_path / "checkpoints" / "support-tickets"
    result = runner.invoke(app, ["train", str(EXAMPLE / "recipe.toml"), "--out", str(checkpoint), "--no-progress",
                                 "--threads", "1"])
    assert result.exit_code == 0, result.output[-3000:]
    assert (checkpoint / "model.safetensors").is_file()

    own = tmp_path / "my-models"
    # as a user runs it, output piped: a real process, so its stdout/stderr are not a terminal
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    done = subprocess.run([sys.executable, "-m", "cli.main", "export", str(checkpoint), "--out",
                           str(own / "support-tickets")], cwd=ROOT, env={**env, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "argmax mismatches 0" in done.stdout
    # not wrapped at 80 columns when piped, and no third-party warnings (torchvision) on export
    assert re.search(r"wrote \S+support-tickets \(support-tickets \w+, classification, 2 labels\)\n", done.stdout)
    assert "torchvision" not in done.stderr, done.stderr[-2000:]
    # a second export onto it is refused without --force
    again = runner.invoke(app, ["export", str(checkpoint), "--out", str(own / "support-tickets")])
    assert again.exit_code == 2 and "--force" in again.output

    # `attserve card` on your own model: without the recipe it says what to pass, in
    # one line; with it, it scores the recipe's own dev/test files and fits the temperature on dev
    bundle = own / "support-tickets"
    config_before = (bundle / "config.json").read_text()
    no_recipe = subprocess.run([sys.executable, "-m", "cli.main", "card", str(bundle), "--no-progress"], cwd=ROOT,
                               env={**env, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=300)
    assert no_recipe.returncode == 2, no_recipe.stderr[-2000:]
    assert "Traceback" not in no_recipe.stderr and "--recipe" in no_recipe.stderr and "train.csv" in no_recipe.stderr
    assert len([line for line in no_recipe.stderr.splitlines() if line.startswith("error:")]) == 1
    assert (bundle / "config.json").read_text() == config_before  # nothing written
    broken = tmp_path / "broken"
    broken.mkdir()
    for name in ("train.csv", "test.csv"):
        (broken / name).write_bytes((EXAMPLE / name).read_bytes())
    (broken / "recipe.toml").write_text((EXAMPLE / "recipe.toml").read_text())  # its dev.csv is missing
    missing = runner.invoke(app, ["card", str(bundle), "--recipe", str(broken / "recipe.toml"), "--no-progress"])
    assert missing.exit_code == 2 and "Traceback" not in missing.output
    assert "dev file" in missing.output and "dev.csv" in missing.output and "does not exist" in missing.output
    carded = runner.invoke(app, ["card", str(bundle), "--recipe", str(EXAMPLE / "recipe.toml"), "--no-progress"])
    assert carded.exit_code == 0, carded.output[-3000:]
    import json

    card = json.loads((bundle / "config.json").read_text())["card"]
    dev_rows = len((EXAMPLE / "dev.csv").read_text().strip().splitlines()) - 1
    test_rows = len((EXAMPLE / "test.csv").read_text().strip().splitlines()) - 1
    assert card["in_domain"]["dev"]["examples"] == dev_rows and card["in_domain"]["test"]["examples"] == test_rows
    assert card["in_domain"]["test"]["accuracy"] >= 0.75  # the tiny demo model separates billing from delivery
    temperature = card["calibration"]["temperature"]
    if card["in_domain"]["dev"]["accuracy"] == 1.0:  # every dev answer right: no finite best temperature
        assert temperature == 1.0 and card["calibration"]["fitted_on"].startswith(f"not fitted: all {dev_rows} in-domain dev")
    else:
        assert card["calibration"]["fitted_on"] == "in-domain dev" and 0.5 <= temperature < 50
        assert card["calibration"]["ece_after"]["in_domain_dev"] <= card["calibration"]["ece_before"]["in_domain_dev"] + 1e-9
    assert set(card["calibration"]["ece_after"]) == {"in_domain_dev", "in_domain_test"}  # held out beside dev
    assert card["training_data"]["dataset"] == "support-tickets"
    assert card["training_data"]["files"]["dev"] == {"file": "dev.csv", "same_as_training": True}
    assert str(ROOT) not in json.dumps(card) and str(tmp_path) not in json.dumps(card)  # file names only

    async def scenario():
        settings = Settings(model_repository=f"{own},{DEFAULT_MODEL_REPOSITORY}",
                            models=["support-tickets", "bbc-act"], max_batch_delay_ms=1)
        async with running_app(settings) as (service_app, client):
            assert (await client.get("/health/ready")).status_code == 200
            answers = {}
            for text in ("where is my parcel", "the invoice shows the wrong amount"):  # training rows
                r = await client.post("/classify", json={"text": text, "model": "support-tickets"})
                assert r.status_code == 200, r.text
                answers[text] = r.json()
            # the bundled model keeps /classify's default: it says "default": true in its config.json
            r = await client.post("/classify", json={"text": "Shares in the bank fell sharply after a loss."})
            listed = (await client.get("/v1/models")).json()
            return answers, r.json(), listed

    answers, default_answer, listed = asyncio.run(scenario())
    assert answers["where is my parcel"]["label"] == "delivery"
    assert answers["the invoice shows the wrong amount"]["label"] == "billing"
    assert set(answers["where is my parcel"]["scores"]) == {"billing", "delivery"}
    # the README's answer to the same request shows every field of the real one
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    shown = readme[readme.index('"where is my parcel", "model": "support-tickets"'):].splitlines()[1]
    assert set(answers["where is my parcel"]) == set(re.findall(r'(?<=[{,])"(\w+)":', shown)) - {"billing", "delivery"}
    assert default_answer["model"] == "bbc-act"
    assert listed["tasks"]["classification"]["default"] == "bbc-act"
    assert "config.json" in listed["tasks"]["classification"]["default_reason"]
    assert sorted(m["name"] for m in listed["models"]) == ["bbc-act", "support-tickets"]
    # no local directory of the training machine in what a client sees
    assert str(ROOT) not in str(listed) and str(tmp_path) not in str(listed)


def test_compose_override_mounts_own_bundles_beside_the_bundled_ones(tmp_path):
    import json
    import shutil

    import pytest

    compose = shutil.which("docker-compose")
    if compose is None:
        pytest.skip("docker-compose (v2) is not installed")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ATTSERVE_", "COMPOSE_"))}
    env.update(GRAFANA_ADMIN_PASSWORD="test-only-password", ATTSERVE_OWN_MODELS=str(tmp_path))
    done = subprocess.run([compose, "--project-directory", str(ROOT), "-f", "docker-compose.yml", "-f",
                           "examples/own-data/compose.own-models.yml", "--profile", "gpu", "config", "--format", "json"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    if done.returncode != 0 and "unknown" in done.stderr.lower() and "format" in done.stderr.lower():
        pytest.skip(f"not Compose v2: {done.stderr[:200]}")
    assert done.returncode == 0, done.stderr
    services = json.loads(done.stdout)["services"]
    for name in ("api", "api-gpu"):
        api = services[name]
        assert api["environment"]["ATTSERVE_MODEL_REPOSITORY"] == "/app/my-models,/app/model_repository"
        mounts = [(v["source"], v["target"], v.get("read_only")) for v in api["volumes"]]
        assert (str(tmp_path), "/app/my-models", True) in mounts
        assert api["environment"]["ATTSERVE_SHUTDOWN_TIMEOUT_S"] == "20"  # the base file's settings stay
    assert services["api-gpu"]["environment"]["ATTSERVE_DEVICE"] == "cuda"
