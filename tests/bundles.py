"""Tiny real bundles for the service tests: one entailment model, one verification model and
two classifiers (topic, sentiment), each an untrained small AttConv-light network with a fixed
seed, exported through the project's one bundle writer (export.bundle.write_bundle_from_network:
ONNX export, parity check, config.json through core.bundle.BundleConfig).

Tests import torch/models only here, to BUILD bundles; the service under test never does.
The `service_bundles` session fixture is registered for every test module by conftest.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

CORPUS = [
    "a man is playing a guitar on the stage .",
    "a woman is slicing an onion in the kitchen .",
    "two dogs run across the snowy field .",
    "the children are sleeping in a tent .",
    "nobody is playing any music .",
    "the stock market fell sharply on monday .",
    "the team won the championship after extra time .",
    "scientists discovered a new species of frog in the rainforest .",
    "the new phone has a larger screen and a faster chip .",
    "parliament passed the budget bill late at night .",
    "this film was wonderful , moving and funny !",
    "the plot was dull and the acting was terrible .",
    "i loved every minute of this book .",
    "worst service i have ever had , never again .",
    "paris is the capital of france .",
    "the eiffel tower was completed in 1889 .",
    "berlin is the capital of germany and its largest city .",
    "the moon orbits the earth roughly every 27 days .",
    "water boils at 100 degrees celsius at sea level .",
    "mount everest is the highest mountain above sea level .",
]


@dataclass(frozen=True)
class Spec:
    name: str
    task: str
    labels: tuple[str, ...]
    max_lengths: dict
    max_evidence: int | None = None
    seed: int = 0


SPECS = (
    Spec("nli", "entailment", ("entailment", "neutral", "contradiction"),
         {"premise_ids": 24, "hypothesis_ids": 16}, seed=1),
    Spec("fever", "verification", ("SUPPORTS", "REFUTES", "NOT ENOUGH INFO"),
         {"claim_ids": 16, "evidence_ids": 20}, max_evidence=5, seed=2),
    Spec("sentiment", "classification", ("negative", "positive"), {"input_ids": 32}, seed=3),
    Spec("topic", "classification", ("world", "sports", "business", "sci/tech"), {"input_ids": 32}, seed=4),
)
ARCHITECTURE = "attconv-light"
SMALL = {"embedding_dim": 16, "hidden_dim": 16, "head_hidden": 16}


def build_bundles(root: Path) -> dict[str, Path]:
    """Write every SPECS bundle under `root` (a model repository) and return name -> path."""
    import torch

    from export.bundle import write_bundle_from_network
    from models import build_network
    from training.tokenizer import build_tokenizer, save_tokenizer

    root.mkdir(parents=True, exist_ok=True)
    tokenizer_path = save_tokenizer(build_tokenizer(CORPUS), root.parent / "tokenizer.json")
    vocab_size = build_tokenizer(CORPUS).get_vocab_size(with_added_tokens=True)
    out = {}
    for spec in SPECS:
        torch.manual_seed(spec.seed)
        network = build_network(ARCHITECTURE, task=spec.task, vocab_size=vocab_size,
                                num_labels=len(spec.labels), dropout=0.0, **SMALL)
        out[spec.name] = write_bundle_from_network(
            network, ARCHITECTURE, spec.name, list(spec.labels), tokenizer_path, root / spec.name,
            max_lengths=spec.max_lengths, max_evidence=spec.max_evidence,
            metrics={"test": {"accuracy": 0.0, "note": "untrained test bundle"}},
            version=f"test-{spec.seed}",
        )
    return out


@pytest.fixture(scope="session")
def service_bundles(tmp_path_factory) -> Path:
    """A model repository with the four test bundles; returns its path.
    ATTSERVE_TEST_BUNDLES=<dir> reuses a repository built earlier by `build_bundles` (local
    iteration only: each export takes seconds)."""
    prebuilt = os.environ.get("ATTSERVE_TEST_BUNDLES")
    if prebuilt:
        return Path(prebuilt)
    root = tmp_path_factory.mktemp("bundles") / "repository"
    build_bundles(root)
    return root


@pytest.fixture
def versioned(service_bundles, tmp_path) -> Path:
    """A repository with fever as versions 1 and 2 (Triton's numbered folders) and nli flat (its
    version: test-1), the model-control tests' layout."""
    repo = tmp_path / "repository"
    for version in ("1", "2"):
        shutil.copytree(service_bundles / "fever", repo / "fever" / version)
    shutil.copytree(service_bundles / "nli", repo / "nli")
    return repo


SHIPPED_REPOSITORY = Path(__file__).resolve().parents[1] / "model_repository"


@pytest.fixture(scope="session")
def shipped_models_server(tmp_path_factory):
    """`python -m service` serving the shipped bundles (model_repository/), started once per
    session for the modules that only send it requests (the Open Inference Protocol, /ui): a
    start loads and warms all eight, 60-90 s on a busy 2-core machine, which each module paid."""
    from bench.harness import ServiceProcess

    server = ServiceProcess(SHIPPED_REPOSITORY, tmp_path_factory.mktemp("shipped") / "service.log",
                            max_batch_delay_ms=2)
    try:
        yield server.start()
    finally:
        if server.proc is not None and server.proc.poll() is None:
            server.terminate(timeout_s=30)


def copy_repository(source: Path, target: Path, names: list[str] | None = None) -> Path:
    """Copy some bundles of `source` into a new repository `target` (to alter them)."""
    target.mkdir(parents=True, exist_ok=True)
    for path in sorted(source.iterdir()):
        if path.is_dir() and (names is None or path.name in names):
            shutil.copytree(path, target / path.name)
    return target


@contextlib.asynccontextmanager
async def running_app(settings, wait_loaded: bool = True, **transport_options):
    """The real app with its lifespan running (models loading in the background), and an
    httpx client talking to it in-process. Yields (app, client)."""
    import httpx

    from service.http.app import create_app

    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app, **transport_options)
        async with httpx.AsyncClient(transport=transport, base_url="http://attserve", timeout=30) as client:
            if wait_loaded:
                for _ in range(600):
                    if app.state.service.loaded:
                        break
                    await asyncio.sleep(0.05)
                assert app.state.service.loaded, "models did not load within 30 s"
            yield app, client


def record_feed_shapes(runtime, seen: set) -> None:
    """Add to `seen` the input shapes of every call `runtime` makes to onnxruntime (its `run`
    gets the feeds after bucket and batch-grid padding, on the CPU and through CUDA's IO binding)."""
    run = runtime.run

    def recorded(feeds, explain=False):
        seen.add(tuple(feeds[i].shape for i in runtime.input_names))
        return run(feeds, explain)

    runtime.run = recorded


def metric_samples(text: str, name: str) -> dict[tuple, float]:
    """Samples of one metric in Prometheus text: {sorted label items: value}."""
    from prometheus_client.parser import text_string_to_metric_families

    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                out[tuple(sorted(sample.labels.items()))] = sample.value
    return out
