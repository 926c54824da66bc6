"""Model cards: OOD set mapping and metrics (training.ood), temperature scaling and ECE
(training.calibration), `attserve card` on a real bundle (training.card), and the service
applying the card's temperature and showing the card."""

from __future__ import annotations

import asyncio
import json
import logging
import os
from pathlib import Path

import numpy as np
import pytest

from tests.bundles import copy_repository, running_app
from training.calibration import expected_calibration_error, fit_temperature, nll
from training.examples import ClaimExample, DatasetSplits, PairExample
from training.ood import OOD_DIR_ENV, ood_sets, selection_score

ENTAILMENT = ["entailment", "neutral", "contradiction"]
VERIFICATION = ["SUPPORTS", "REFUTES", "NOT ENOUGH INFO"]


def _softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


# --- calibration ----------------------------------------------------------------------------

def _calibrated_sample(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Logits and labels drawn from softmax(logits): calibrated at T = 1 by construction."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(scale=2.0, size=(n, 3))
    probs = _softmax(logits)
    labels = np.array([rng.choice(3, p=p) for p in probs])
    return logits, labels


@pytest.mark.parametrize("scale", [3.0, 0.5])
def test_fit_temperature_recovers_the_scale_and_lowers_ece(scale):
    logits, labels = _calibrated_sample(20000, seed=0)
    # scale > 1: over-confident logits (T should come out ~scale > 1); scale < 1: under-confident
    distorted = logits * scale
    t = fit_temperature(distorted, labels)
    assert t == pytest.approx(scale, rel=0.08)
    assert (t > 1) == (scale > 1)
    before = expected_calibration_error(_softmax(distorted), labels)
    after = expected_calibration_error(_softmax(distorted / t), labels)
    assert after < before / 2 and after < 0.02
    assert nll(distorted, labels, t) < nll(distorted, labels, 1.0)
    assert fit_temperature(distorted, labels) == t  # deterministic


def test_ece_by_hand():
    probs = np.array([[0.9, 0.1], [0.9, 0.1], [0.6, 0.4], [0.3, 0.7]])
    labels = np.array([0, 1, 0, 1])
    # 2 bins: (0, .5] empty, (.5, 1]: all four, confidence mean .775, accuracy .75
    assert expected_calibration_error(probs, labels, bins=2) == pytest.approx(0.025)
    # 10 bins: (.8,.9]: conf .9 acc .5 (2 of 4); (.5,.6]: .6 vs 1; (.6,.7]: .7 vs 1
    want = 0.5 * 0.4 + 0.25 * 0.4 + 0.25 * 0.3
    assert expected_calibration_error(probs, labels, bins=10) == pytest.approx(want)
    assert expected_calibration_error(np.eye(3), np.arange(3)) == 0.0
    with pytest.raises(ValueError):
        fit_temperature(np.zeros((2, 3)), np.array([0, 3]))


# --- OOD sets -------------------------------------------------------------------------------

def _write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


@pytest.fixture
def ood_dir(tmp_path) -> Path:
    root = tmp_path / "ood-dev"
    root.mkdir()
    _write_jsonl(root / "snli_1.0_dev.jsonl", [
        {"premise": "p1", "hypothesis": "h1", "label": "entailment"},
        {"premise": "p2", "hypothesis": "h2", "label": "neutral"},
        {"premise": "p3", "hypothesis": "h3", "label": "contradiction"},
        {"premise": "p4", "hypothesis": "h4", "label": "contradiction"},
    ])
    _write_jsonl(root / "rte_train_dev.jsonl", [
        {"premise": "rp1", "hypothesis": "rh1", "label": "entailment", "tag": "train"},
        {"premise": "rp2", "hypothesis": "rh2", "label": "not_entailment", "tag": "train"},
        {"premise": "rp3", "hypothesis": "rh3", "label": "not_entailment", "tag": "dev"},
    ])
    _write_jsonl(root / "fever_symmetric_v0.2_dev.jsonl", [
        {"id": "1", "claim": "c1", "evidence": "e1", "label": "SUPPORTS", "sentence1": "e1", "sentence2": "c1"},
        {"id": "2", "claim": "c2", "evidence": "e2", "label": "REFUTES", "sentence1": "e2", "sentence2": "c2"},
    ])
    return root


def _one_hot(indices: list[int], width: int = 3, second: list[int] | None = None) -> np.ndarray:
    """Logits with 3.0 at `indices` and, optionally, 2.0 at `second` (the runner-up)."""
    out = np.zeros((len(indices), width))
    out[np.arange(len(indices)), indices] = 3.0
    if second is not None:
        out[np.arange(len(indices)), second] = 2.0
    return out


def test_entailment_mapping_and_metrics(ood_dir):
    sets = {s.name: s for s in ood_sets("entailment", root=ood_dir)}
    assert list(sets) == ["snli-dev", "rte", "fever-symmetric"] and all(s.task == "entailment" for s in sets.values())

    snli = sets["snli-dev"]
    assert snli.examples[0] == PairExample("p1", "h1", "entailment") and snli.labels == ENTAILMENT
    m = snli.metrics(_one_hot([0, 1, 2, 0]), ENTAILMENT)
    assert m["examples"] == 4 and m["accuracy"] == 0.75 and m["majority"] == 0.5
    assert "accuracy_two_way" not in m

    rte = sets["rte"]
    assert rte.labels == ["entailment", "not_entailment"]
    # neutral and contradiction both count as not_entailment
    m = rte.metrics(_one_hot([0, 1, 2]), ENTAILMENT)
    assert m["accuracy"] == 1.0 and m["macro_f1"] == 1.0 and m["majority"] == pytest.approx(2 / 3)
    assert rte.metrics(_one_hot([1, 0, 0]), ENTAILMENT)["accuracy"] == 0.0

    fever = sets["fever-symmetric"]
    assert fever.examples[1] == PairExample("e2", "c2", "contradiction")  # premise = evidence
    # argmax neutral is wrong; restricted to entailment vs contradiction the runner-up decides
    m = fever.metrics(_one_hot([1, 1], second=[0, 2]), ENTAILMENT)
    assert m["accuracy"] == 0.0 and m["accuracy_two_way"] == 1.0 and m["macro_f1_two_way"] == 1.0
    assert m["labels"] == ["entailment", "contradiction"]
    # model labels are looked up by name, not position, and case-insensitively
    upper = ["CONTRADICTION", "ENTAILMENT", "NEUTRAL"]
    assert fever.metrics(_one_hot([1, 0]), upper)["accuracy"] == 1.0
    # a model with SciTail's two labels can answer none of them: the card and training skip them
    assert all(s.fits(upper) and s.fits(ENTAILMENT) for s in sets.values())
    assert not any(s.fits(["entails", "neutral"]) for s in sets.values())
    assert fever.fits(["entailment", "contradiction"]) and not snli.fits(["entailment", "contradiction"])


def test_verification_mapping_and_metrics(ood_dir):
    sets = {s.name: s for s in ood_sets("verification", root=ood_dir)}
    assert list(sets) == ["fever-symmetric", "rte", "snli-dev"]
    fever, rte, snli = sets["fever-symmetric"], sets["rte"], sets["snli-dev"]
    assert fever.examples[0] == ClaimExample("c1", ("e1",), "SUPPORTS")
    m = fever.metrics(_one_hot([2, 2], second=[0, 1]), VERIFICATION)
    assert m["accuracy"] == 0.0 and m["accuracy_two_way"] == 1.0

    assert rte.examples[0] == ClaimExample("rh1", ("rp1",), "SUPPORTS") and rte.labels == ["SUPPORTS", "NOT SUPPORTS"]
    assert rte.metrics(_one_hot([0, 1, 2]), VERIFICATION)["accuracy"] == 1.0

    assert [e.label for e in snli.examples] == ["SUPPORTS", "NOT ENOUGH INFO", "REFUTES", "REFUTES"]
    assert snli.examples[1].claim == "h2" and snli.examples[1].evidence == ("p2",)
    assert snli.metrics(_one_hot([0, 2, 1, 0]), VERIFICATION)["accuracy"] == 0.75
    with pytest.raises(ValueError):
        snli.metrics(_one_hot([0, 1]), VERIFICATION)  # wrong row count


def test_missing_folder_classification_subsets_and_selection(ood_dir, tmp_path, monkeypatch, caplog):
    with caplog.at_level(logging.WARNING, logger="training.ood"):
        assert ood_sets("entailment", root=tmp_path / "nowhere") == []
    assert any(r.message == "ood sets unavailable" for r in caplog.records)
    assert ood_sets("classification", root=ood_dir) == []
    monkeypatch.setenv(OOD_DIR_ENV, str(ood_dir))
    assert [len(s) for s in ood_sets("entailment")] == [4, 3, 2]
    first = [s.examples for s in ood_sets("entailment", max_examples=2)]
    assert [len(x) for x in first] == [2, 2, 2] and first == [s.examples for s in ood_sets("entailment", max_examples=2)]

    assert selection_score(0.8, {}) == 0.8
    assert selection_score(0.8, {"a": {"accuracy": 0.4}, "b": {"accuracy": 0.6}}) == pytest.approx(0.65)


def test_confidence_of_a_collapsed_label_is_its_total_probability(ood_dir):
    rte = {s.name: s for s in ood_sets("entailment", root=ood_dir)}["rte"]
    probs = np.array([[0.5, 0.3, 0.2], [0.2, 0.5, 0.3], [0.1, 0.1, 0.8]])
    predicted, confidence = rte.confidences(probs, ENTAILMENT)
    assert predicted.tolist() == [0, 1, 1]
    assert confidence == pytest.approx([0.5, 0.8, 0.9])


# --- attserve card on a real bundle ---------------------------------------------------------

def _onnx_logits(bundle: Path, examples: list[PairExample]) -> np.ndarray:
    """The graph run one example at a time, unpadded (independent of card's batching)."""
    import onnxruntime as ort

    from core.tokenization import TextEncoder

    config = json.loads((bundle / "config.json").read_text())
    encoder = TextEncoder.from_file(bundle / "tokenizer.json")
    session = ort.InferenceSession(str(bundle / "model.onnx"), providers=["CPUExecutionProvider"])
    rows = []
    for e in examples:
        feeds = {name: np.array([encoder.encode([text], config["max_lengths"][name]).ids[0]], dtype=np.int64)
                 for name, text in zip(config["inputs"], (e.premise, e.hypothesis))}
        rows.append(session.run(None, feeds)[0][0])
    return np.array(rows)


def _pairs(n: int, seed: int, words: list[str]) -> list[PairExample]:
    rng = np.random.default_rng(seed)
    return [PairExample(" ".join(rng.choice(words, size=rng.integers(3, 12))),
                        " ".join(rng.choice(words, size=rng.integers(2, 8))), ENTAILMENT[i % 3]) for i in range(n)]


def test_card_on_a_bundle_writes_config_the_service_loads(service_bundles, tmp_path):
    from tests.bundles import CORPUS
    from core.bundle import load_bundle
    from training.card import build_card, write_card

    bundle = copy_repository(service_bundles, tmp_path / "repo", ["nli"]) / "nli"
    before = json.loads((bundle / "config.json").read_text())
    known = sorted({w for line in CORPUS for w in line.split() if w.isalpha()})
    dev, test = _pairs(300, 1, known), _pairs(200, 2, known)
    splits = DatasetSplits("toy-nli", "entailment", list(ENTAILMENT), train=dev[:10], dev=dev, test=test,
                           description="toy pairs")
    ood_root = tmp_path / "ood"
    ood_root.mkdir()
    unknown_words = ["zyzzyva", "quixotic", "xylograph"]  # not in the test tokenizer's vocabulary
    _write_jsonl(ood_root / "snli_1.0_dev.jsonl", [{"premise": " ".join(known[:5]), "hypothesis": " ".join(known[5:8]), "label": "neutral"}] * 3)
    _write_jsonl(ood_root / "rte_train_dev.jsonl", [{"premise": " ".join(unknown_words), "hypothesis": "quixotic", "label": "entailment"}] * 2)
    _write_jsonl(ood_root / "fever_symmetric_v0.2_dev.jsonl", [
        {"claim": "paris is in france", "evidence": "paris is the capital of france zyzzyva", "label": "SUPPORTS"},
        {"claim": "berlin is the capital", "evidence": "berlin is the capital of germany", "label": "REFUTES"},
    ])

    card = build_card(bundle, ood_dir=ood_root, failure_modes=["reads sarcasm literally"], splits=splits, progress=False)

    # in-domain figures are those of the graph itself, batched or not
    want = _onnx_logits(bundle, test)
    gold = np.array([ENTAILMENT.index(e.label) for e in test])
    assert card["in_domain"]["test"]["accuracy"] == pytest.approx(float((want.argmax(1) == gold).mean()))
    assert card["training_data"] == {"dataset": "toy-nli", "train_examples": 10, "description": "toy pairs"}
    assert set(card["ood_dev"]) == {"snli-dev", "rte", "fever-symmetric"}
    assert card["ood_dev"]["rte"]["examples"] == 2 and "accuracy_two_way" in card["ood_dev"]["fever-symmetric"]
    shares = card["unknown_token_share"]
    assert shares["in_domain_test"] == 0.0 and shares["snli-dev"] == 0.0 and shares["rte"] == 1.0
    # fever: 1 unknown among (4 + 7) + (4 + 6) tokens
    assert shares["fever-symmetric"] == pytest.approx(1 / 21)
    calibration = card["calibration"]
    dev_logits = _onnx_logits(bundle, dev)
    dev_gold = np.array([ENTAILMENT.index(e.label) for e in dev])
    assert calibration["temperature"] == pytest.approx(fit_temperature(dev_logits, dev_gold), rel=1e-3)
    assert set(calibration["ece_before"]) == set(calibration["ece_after"]) == {"in_domain_dev", "in_domain_test", "snli-dev", "rte", "fever-symmetric"}
    assert calibration["ece_after"]["in_domain_dev"] <= calibration["ece_before"]["in_domain_dev"] + 1e-9
    assert card["known_failure_modes"] == ["reads sarcasm literally"]

    write_card(bundle, card)
    after = json.loads((bundle / "config.json").read_text())
    assert {k: v for k, v in after.items() if k != "card"} == {k: v for k, v in before.items() if k != "card"}
    assert after["card"] == card
    assert load_bundle(bundle).config.temperature == calibration["temperature"]
    # failure_modes None keeps the existing list
    again = build_card(bundle, ood_dir=tmp_path / "no-ood", splits=splits, progress=False)
    assert again["known_failure_modes"] == ["reads sarcasm literally"] and again["ood_dev"] == {}
    assert "by_source" not in again["in_domain"]["test"]
    # a mixed dataset: each source's accuracy beside the pooled one
    import dataclasses

    sources = {"dev": ["a", "b"] * 150, "test": ["a"] * 50 + ["b"] * 150}
    mixed = build_card(bundle, ood_dir=tmp_path / "no-ood", splits=dataclasses.replace(splits, sources=sources), progress=False)
    correct = want.argmax(1) == gold
    assert mixed["in_domain"]["test"]["by_source"] == {
        "a": {"examples": 50, "accuracy": pytest.approx(float(correct[:50].mean()))},
        "b": {"examples": 150, "accuracy": pytest.approx(float(correct[50:].mean()))},
    }
    assert mixed["in_domain"]["dev"]["by_source"]["a"]["examples"] == 150


def test_a_perfectly_separated_dev_set_fits_no_temperature(service_bundles, tmp_path):
    """Every dev answer right: the dev NLL keeps falling as T -> 0 (a fit ends at the search
    bound, ~0.02, and the service would answer 1.0 for everything, issue 56). The card keeps
    T = 1, says why, and still reports the held-out (test) ECE beside dev's."""
    from tests.bundles import CORPUS
    from core.bundle import load_bundle
    from training.card import build_card, write_card

    bundle = copy_repository(service_bundles, tmp_path / "repo", ["nli"]) / "nli"
    known = sorted({w for line in CORPUS for w in line.split() if w.isalpha()})
    pairs = _pairs(200, 3, known)
    logits = _onnx_logits(bundle, pairs)
    # dev: each pair labelled with the model's own answer (separated by construction); test: as drawn
    dev = [PairExample(p.premise, p.hypothesis, ENTAILMENT[int(i)]) for p, i in zip(pairs[:40], logits[:40].argmax(1))]
    test = pairs[40:]
    dev_gold = np.array([ENTAILMENT.index(e.label) for e in dev])
    assert fit_temperature(logits[:40], dev_gold) < 0.05  # what a plain fit makes of it
    splits = DatasetSplits("toy-nli", "entailment", list(ENTAILMENT), train=dev[:10], dev=dev, test=test)

    card = build_card(bundle, ood_dir=tmp_path / "no-ood", splits=splits, progress=False)

    calibration = card["calibration"]
    assert card["in_domain"]["dev"]["accuracy"] == 1.0
    assert calibration["temperature"] == 1.0
    assert calibration["fitted_on"].startswith("not fitted: all 40 in-domain dev answers are right")
    assert "fitted_temperature" not in calibration and calibration["warnings"] == []
    assert set(calibration["ece_before"]) == {"in_domain_dev", "in_domain_test"}
    assert calibration["ece_after"] == calibration["ece_before"]  # T = 1 on both
    write_card(bundle, card)
    assert load_bundle(bundle).config.temperature == 1.0


def test_the_card_temperature_has_a_floor_and_warns_when_held_out_ece_gets_worse():
    """One wrong dev answer by a hair: the NLL fit sharpens far below the floor; the card uses
    the floor, keeps the fit beside it, and warns, also when test ECE gets worse than at T = 1."""
    from training.card import MIN_TEMPERATURE, calibration_warnings, card_temperature

    rng = np.random.default_rng(0)
    gold = rng.integers(0, 3, 40)
    logits = rng.normal(scale=0.3, size=(40, 3))
    logits[np.arange(40), gold] += 1.5  # every gold logit the row's maximum ...
    logits[0, (gold[0] + 1) % 3] = logits[0, gold[0]] + 0.01  # ... but one, by a hair
    assert fit_temperature(logits, gold) < MIN_TEMPERATURE / 2

    fit = card_temperature(logits, gold, "in-domain dev")
    assert fit["temperature"] == MIN_TEMPERATURE == fit["floor"] and fit["fitted_on"] == "in-domain dev"
    assert fit["fitted_temperature"] == pytest.approx(fit_temperature(logits, gold))
    # a fit above the floor is kept as it is, with no floor keys
    tempered = card_temperature(logits * 20, gold, "in-domain dev")  # the same fit, 20 times the temperature
    assert tempered == {"temperature": pytest.approx(fit_temperature(logits * 20, gold)), "fitted_on": "in-domain dev"}
    assert tempered["temperature"] > MIN_TEMPERATURE

    worse = calibration_warnings(fit, {"in_domain_dev": 0.05, "in_domain_test": 0.137},
                                 {"in_domain_dev": 0.01, "in_domain_test": 0.250}, dev_examples=40)
    assert len(worse) == 2 and "below the floor 0.5" in worse[0]
    assert "held-out in-domain test ECE worse: 0.1370 -> 0.2500" in worse[1] and "40 examples" in worse[1]
    better = calibration_warnings(tempered, {"in_domain_dev": 0.05, "in_domain_test": 0.137},
                                  {"in_domain_dev": 0.01, "in_domain_test": 0.100}, dev_examples=40)
    assert better == []
    # fitted on the test split itself: nothing is held out to check it on
    assert calibration_warnings(tempered, {"in_domain_dev": 0.05, "in_domain_test": 0.05},
                                {"in_domain_dev": 0.09, "in_domain_test": 0.09}, 40, held_out=False) == []


# --- the service ----------------------------------------------------------------------------

def _set_card(bundle: Path, card: dict) -> None:
    config = json.loads((bundle / "config.json").read_text())
    config["card"] = card
    (bundle / "config.json").write_text(json.dumps(config))


def test_service_applies_the_temperature_and_shows_the_card(service_bundles, tmp_path):
    import onnxruntime as ort

    from service.settings import Settings
    from core.tokenization import TextEncoder

    repo = copy_repository(service_bundles, tmp_path / "repo", ["nli", "fever"])
    temperature = 2.5
    card = {"training_data": {"dataset": "toy"}, "ood_dev": {"rte": {"accuracy": 0.5}},
            "calibration": {"temperature": temperature, "fitted_on": "in-domain dev"},
            "known_failure_modes": ["ignores negation"]}
    _set_card(repo / "nli", card)

    bundle = repo / "nli"
    config = json.loads((bundle / "config.json").read_text())
    encoder = TextEncoder.from_file(bundle / "tokenizer.json")
    pair = {"premise": "two dogs run across the snowy field .", "hypothesis": "the children are sleeping ."}
    feeds = {name: np.array([encoder.encode([pair[field]], 64).ids[0]], dtype=np.int64)
             for name, field in zip(config["inputs"], ("premise", "hypothesis"))}
    logits = ort.InferenceSession(str(bundle / "model.onnx"), providers=["CPUExecutionProvider"]).run(None, feeds)[0].astype(np.float64)
    want = _softmax(logits / temperature)[0]
    raw = _softmax(logits)[0]
    assert not np.allclose(want, raw, atol=1e-4)  # the temperature makes a visible difference

    async def scenario():
        settings = Settings(model_repository=repo, max_batch_delay_ms=1)
        async with running_app(settings) as (app, client):
            answer = (await client.post("/entailment", json=pair)).json()
            assert list(answer["scores"].values()) == pytest.approx(want.tolist(), abs=1e-5)
            assert answer["label"] == config["labels"][int(np.argmax(logits))]
            batch = (await client.post("/entailment", json={"inputs": [pair, {"premise": "a b c d e f g h i", "hypothesis": "x"}]})).json()
            assert list(batch["results"][0]["scores"].values()) == pytest.approx(want.tolist(), abs=1e-5)

            models = {m["name"]: m for m in (await client.get("/v1/models")).json()["models"]}
            shown = models["nli"]["card"]
            assert models["nli"]["temperature"] == temperature
            assert shown["calibration"]["temperature"] == temperature and shown["calibration"]["fitted_on"] == "in-domain dev"
            assert shown["ood_dev"] == {"rte": {"accuracy": 0.5}} and shown["known_failure_modes"] == ["ignores negation"]
            assert models["fever"]["card"] is None and models["fever"]["temperature"] == 1.0

    asyncio.run(scenario())


@pytest.mark.parametrize("temperature", [0, -1.5, "nan"])
def test_non_positive_temperature_is_refused_at_load(service_bundles, tmp_path, temperature):
    from core.bundle import BundleError, load_bundle
    from service.settings import Settings

    repo = copy_repository(service_bundles, tmp_path / "repo", ["nli", "topic"])
    value = float(temperature)
    config = json.loads((repo / "nli" / "config.json").read_text())
    config["card"] = {"calibration": {"temperature": value}}
    (repo / "nli" / "config.json").write_text(json.dumps(config))  # NaN written as the JSON token NaN
    with pytest.raises(BundleError, match=r"(?s)config\.json.*card\.calibration\.temperature.*must be a finite number > 0"):
        load_bundle(repo / "nli")

    async def scenario():
        async with running_app(Settings(model_repository=repo, max_batch_delay_ms=1,
                                        allow_partial_start=True)) as (app, client):
            models = {m["name"]: m for m in (await client.get("/v1/models")).json()["models"]}
            assert models["nli"]["status"] == "failed" and "temperature" in models["nli"]["error"]
            assert models["topic"]["status"] == "ready"

    asyncio.run(scenario())


# --- baseline on the OOD sets ---------------------------------------------------------------

def test_tfidf_baseline_scores_the_ood_sets(tmp_path):
    """A keyword task (the hypothesis word decides the label) learnt in domain carries over to
    OOD sets that use the same keywords, through each set's label mapping."""
    import random

    from training.baseline import run_baseline

    rng = random.Random(0)
    keyword = {"entailment": "certainly", "neutral": "perhaps", "contradiction": "never"}
    filler = ["red", "car", "dog", "tree", "house", "river", "child", "ball", "street", "music"]

    def pair(label: str) -> PairExample:
        return PairExample(" ".join(rng.sample(filler, 5)), f"{' '.join(rng.sample(filler, 2))} {keyword[label]}", label)

    parts = [[pair(ENTAILMENT[i % 3]) for i in range(n)] for n in (300, 60, 60)]
    splits = DatasetSplits("keywords", "entailment", list(ENTAILMENT), *parts)
    root = tmp_path / "ood"
    root.mkdir()
    _write_jsonl(root / "snli_1.0_dev.jsonl", [{"premise": "a b", "hypothesis": f"dog {keyword[x]}", "label": x} for x in ENTAILMENT * 2])
    _write_jsonl(root / "rte_train_dev.jsonl", [
        {"premise": "tree house", "hypothesis": "river certainly", "label": "entailment"},
        {"premise": "tree house", "hypothesis": "river perhaps", "label": "not_entailment"},
        {"premise": "tree house", "hypothesis": "river never", "label": "not_entailment"},
    ])
    _write_jsonl(root / "fever_symmetric_v0.2_dev.jsonl", [
        {"claim": "the ball certainly", "evidence": "street music", "label": "SUPPORTS"},
        {"claim": "the ball never", "evidence": "street music", "label": "REFUTES"},
    ])
    result = run_baseline(splits, ood=ood_sets("entailment", root=root))
    ood = result["ood_dev"]
    assert set(ood) == {"snli-dev", "rte", "fever-symmetric"}
    assert ood["snli-dev"]["accuracy"] == 1.0 and ood["rte"]["accuracy"] == 1.0
    assert ood["fever-symmetric"]["accuracy"] == 1.0 and ood["fever-symmetric"]["accuracy_two_way"] == 1.0
    assert ood["rte"]["majority"] == pytest.approx(2 / 3) and ood["snli-dev"]["majority"] == pytest.approx(1 / 3)
    assert "ood_dev" not in run_baseline(splits)


@pytest.mark.parametrize("args, expected", [
    (["--dataset", "no-such-data"], "unknown dataset 'no-such-data'"),  # not a named dataset
    (["--dataset", "sick"], "sick"),  # a named dataset whose local files are missing
    (["--dataset", "bbc", "--recipe", "examples/own-data/recipe.toml"], "not both"),
    (["--recipe", "no/such/recipe.toml"], "no/such/recipe.toml"),
])
def test_card_errors_are_one_line_and_a_non_zero_exit(service_bundles, tmp_path, monkeypatch, args, expected):
    """`attserve card` on data it cannot read: one `error:` line naming the cause, exit 2,
    no traceback, config.json untouched."""
    import subprocess
    import sys

    bundle = copy_repository(service_bundles, tmp_path / "repo", ["nli"]) / "nli"
    before = (bundle / "config.json").read_text()
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root), "ATTSERVE_BENCHMARK_DIR": str(tmp_path / "empty")}
    done = subprocess.run([sys.executable, "-m", "cli.main", "card", str(bundle), "--no-progress", *args], cwd=root, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and expected in errors[0], done.stderr[-2000:]
    assert (bundle / "config.json").read_text() == before


def test_a_bundle_trained_from_files_asks_for_its_recipe():
    from training.card import resolve_dataset

    raw = {"name": "support-tickets", "task": "classification",
           "data_checksums": {"train.csv": "0" * 64, "dev.csv": "1" * 64, "test.csv": "2" * 64}}
    with pytest.raises(ValueError, match=r"support-tickets was trained from your own files \(train.csv, dev.csv, test.csv\): pass --recipe"):
        resolve_dataset(raw, Path("/somewhere/support-tickets"), recipes_dir=Path("/nonexistent"))
    assert resolve_dataset({"data_checksums": {"tweets/x.csv": "0" * 64}}, Path("b"), recipes_dir=Path("/nonexistent")) == "tweets"
