"""Model cards: what a bundle was trained on and how it holds up, written into config.json.

`build_card` runs the bundle's own ONNX graph (onnxruntime, CPU) on the in-domain dev and test
splits and on the out-of-domain dev sets of its task (`training.ood`), through the project's
one encoding path (`training.batching.encode_examples` with the bundle's tokenizer and max
lengths), and reports:

- in-domain and OOD accuracy / macro F1 (OOD metrics as `OodSet.metrics`); for a mixed
  dataset (DatasetSplits.sources) also each source's accuracy (`in_domain.<part>.by_source`);
- the share of (non-pad) token ids that are unknown ids ([UNK], plus [OOVn] hash buckets
  when the tokenizer has them), i.e. how much of each set the model cannot read;
- a temperature fitted on in-domain dev logits (NLL), with the ECE (15 bins) before and after
  it on every set; the service divides logits by it before the softmax. Bounded
  (`card_temperature`): a dev split the model answers entirely right is not fitted (T stays 1;
  its likelihood has no finite best T), and a fit below MIN_TEMPERATURE is raised to it. When T
  makes the held-out (in-domain test) ECE worse than T = 1, `calibration.warnings` says so;
- known failure modes (free text, given by the caller).

The data: the bundle's named dataset (config.json, recipes/<name>.toml or its data checksums), or
`recipe=` (`attserve card BUNDLE --recipe RECIPE.toml`): the recipe's [data], which for a model
trained on your own files means its dev split fits the temperature and its test split is scored.
The card then names the files (file names only, and whether each is the file the bundle was
trained on, by its checksum), never their directories.

`write_card` stores it as `card` in config.json, keeping every other key; no checksum covers
config.json (only model.onnx and tokenizer.json are hashed), and the result is validated by
`core.bundle` before it replaces the file. No torch is needed.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import pydantic_core
from tqdm.auto import tqdm

from core.bundle import CONFIG_FILE, Bundle, BundleConfig, load_bundle, read_config
from core.tasks import TASK_OF_DATASET, TASKS
from core.tokenization import PAD_ID, UNK_TOKEN, TextEncoder, pad_2d, pad_3d
from training.batching import encode_examples, label_ids
from training.calibration import calibrated_probs, ece_from_confidence, expected_calibration_error, fit_temperature
from training.examples import ClaimExample, DatasetSplits, Example, PairExample, TextExample, rename_labels
from training.ood import OodSet, ood_sets
from training.recipes import recipe_table

log = logging.getLogger(__name__)

BATCH_SIZE = 256
ECE_BINS = 15
REPO_ROOT = Path(__file__).resolve().parents[1]
OOV_TOKEN = re.compile(r"^\[OOV\d+\]$")
# The card never sharpens the logits more than 2x (T >= 0.5). Measured (issue 56): the seven
# shipped bundles fit T = 1.07-1.98 on dev sets of 1,000+; for logits calibrated at T = 1 by
# construction (2 labels, accuracy 83-95%), T fitted on 40 dev examples fell below 0.5 in about
# 5% of 300 draws or more (down to 0.06), on 400 never (lowest 0.53-0.73): the floor cuts a
# small dev's chance tail and leaves a large dev's fit alone. Small SciTail models (160 train /
# 40 dev, 8 seeds) fitted T < 1 four times (0.63-0.90), and each got a worse test ECE than at T = 1.
MIN_TEMPERATURE = 0.5


# --- what the bundle was trained on ---------------------------------------------------------

def resolve_dataset(raw: dict[str, Any], bundle_dir: Path, recipes_dir: Path = REPO_ROOT / "recipes") -> str:
    """The bundle's training dataset name: config.json's recipe/data section when it has one,
    else the recipe of the same name in recipes/, else inferred from its task and data
    checksums (snli -> snli / snli-verification, bbc, tweets)."""
    for section in (raw.get("recipe", {}).get("data") if isinstance(raw.get("recipe"), dict) else None, raw.get("data")):
        if isinstance(section, dict) and section.get("dataset"):
            return str(section["dataset"])
    for name in (raw.get("name"), bundle_dir.name):
        recipe = recipes_dir / f"{name}.toml"
        if name and recipe.is_file():
            dataset = recipe_table(recipe).get("data", {}).get("dataset")
            if dataset:
                return str(dataset)
    checksums = raw.get("data_checksums", {})
    sources = {key.split("/", 1)[0] for key in checksums}
    if sources == {"snli"}:
        # the SNLI-drawn dataset of the bundle's task (core.tasks.TASK_OF_DATASET)
        return next((d for d in ("snli-verification", "snli") if TASK_OF_DATASET.get(d) == raw.get("task")), "snli")
    if len(sources) == 1 and sources <= {"bbc", "tweets"}:
        return sources.pop()
    files = [key for key in checksums if "/" not in key]
    if files:  # load_from_files keys its checksums by bare file name: the user's own files
        raise ValueError(f"{bundle_dir.name} was trained from your own files ({', '.join(files)}): pass --recipe RECIPE.toml "
                         "(the recipe it was trained with) to score its dev and test files")
    raise ValueError(f"{bundle_dir.name}: cannot tell the training dataset (no recipes/{bundle_dir.name}.toml); "
                     "pass --recipe RECIPE.toml (your own files) or --dataset NAME (a named dataset)")


def recorded_label_names(raw: dict[str, Any], bundle_dir: Path, recipes_dir: Path = REPO_ROOT / "recipes") -> dict[str, str]:
    """The `[data] label_names` the bundle was trained with: its config's recipe section, else the
    recipe of the same name in recipes/ ({} when neither renames a label)."""
    section = raw.get("recipe", {}).get("data") if isinstance(raw.get("recipe"), dict) else None
    if isinstance(section, dict) and section.get("label_names"):
        return dict(section["label_names"])
    for name in (raw.get("name"), bundle_dir.name):
        recipe = recipes_dir / f"{name}.toml"
        if name and recipe.is_file():
            return dict(recipe_table(recipe).get("data", {}).get("label_names") or {})
    return {}


def recipe_splits(recipe: Any, cache_dir: str | Path | None = None) -> DatasetSplits:
    """The splits of a recipe's [data]: its named dataset, or its train/dev/test files, with the
    labels renamed as `[data] label_names` says (what `training.trainer.load_splits` trains on,
    read without importing torch). A missing file is a FileNotFoundError that names the recipe key."""
    from training.datasets import load_dataset, load_from_files

    data = recipe.data
    if data.dataset is not None:
        splits = load_dataset(data.dataset, cache_dir=cache_dir)
    else:
        for key in ("train", "dev", "test"):
            path = getattr(data, key)
            if not Path(path).is_file():
                raise FileNotFoundError(f"recipe {recipe.name}: its [data] {key} file {path} does not exist")
        splits = load_from_files(data.train, data.dev, data.test, data.format, labels=data.labels, name=recipe.name,
                                 task=data.task)
    return rename_labels(splits, data.label_names) if data.label_names else splits


def _recipe_files(recipe: Any, raw: dict[str, Any]) -> dict[str, Any]:
    """File names (never directories) of a recipe's [data] files, and whether each is the file
    the bundle was trained on (its sha256 in the bundle's data_checksums; None: not recorded)."""
    from training.datasets import sha256_file

    data = recipe.data
    checksums = raw.get("data_checksums", {})
    files: dict[str, Any] = {"format": data.format}
    for key in ("train", "dev", "test"):
        name = Path(getattr(data, key)).name
        recorded = checksums.get(name)
        same = None if recorded is None else sha256_file(Path(getattr(data, key))) == recorded
        if same is False:
            log.warning("not the file the bundle was trained on", extra={"file": name, "split": key})
        files[key] = {"file": name, "same_as_training": same}
    return files


# --- running the graph ----------------------------------------------------------------------

def unknown_ids(encoder: TextEncoder) -> list[int]:
    """Ids that stand for words the vocabulary does not know: the encoder's own
    `unknown_ids()` when it has one, else [UNK] plus any [OOVn] hash-bucket tokens."""
    own = getattr(encoder, "unknown_ids", None)
    if own is not None:
        ids = own() if callable(own) else own
        return sorted({int(i) for i in ids})
    vocab = encoder.tokenizer.get_vocab(with_added_tokens=True)
    ids = {vocab[UNK_TOKEN]} | {i for token, i in vocab.items() if OOV_TOKEN.match(token)}
    return sorted(ids)


def _cost(example: Example) -> int:
    if isinstance(example, TextExample):
        return len(example.text)
    if isinstance(example, PairExample):
        return len(example.premise) + len(example.hypothesis)
    if isinstance(example, ClaimExample):
        return len(example.claim) + len(example.evidence) * max((len(s) for s in example.evidence), default=0)
    raise TypeError(f"not an example: {type(example).__name__}")


@dataclass
class Scored:
    logits: np.ndarray  # (N, C), in example order
    tokens: int  # non-pad ids fed to the graph
    unknown: int  # of which unknown ids
    # verification graphs: each example's evidence_scores over its own sentences, in example order
    evidence_scores: list[np.ndarray] | None = None

    @property
    def unknown_share(self) -> float:
        return self.unknown / self.tokens if self.tokens else 0.0


def open_session(model_path: str | Path, threads: int = 1):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    return ort.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"])


def count_ids(ids: Sequence[np.ndarray], unknown: np.ndarray) -> tuple[int, int]:
    """(non-pad ids, of which unknown ids) over the arrays fed to the graph."""
    tokens = unknowns = 0
    for arr in ids:
        real = arr[arr != PAD_ID]
        tokens += int(real.size)
        unknowns += int(np.isin(real, unknown).sum())
    return tokens, unknowns


def score_examples(
    session: Any,
    encoder: TextEncoder,
    config: BundleConfig,
    examples: Sequence[Example],
    batch_size: int = BATCH_SIZE,
    desc: str | None = None,
    progress: bool = True,
) -> Scored:
    """Logits of the bundle's graph for `examples` (batched by length), unknown-id counts, and
    for verification each claim's evidence_scores."""
    unknown = np.array(unknown_ids(encoder), dtype=np.int64)
    order = np.argsort([_cost(e) for e in examples], kind="stable")
    logits: np.ndarray | None = None
    tokens = unknowns = 0
    starts = range(0, len(order), batch_size)
    # a task with a per-text output (verification's evidence_scores) whose graph has it
    per_text = TASKS[config.task].per_text
    evidence: list[np.ndarray] | None = ([np.empty(0)] * len(examples)
                                         if per_text is not None and TASKS[config.task].labelled and per_text in config.outputs
                                         else None)
    for start in tqdm(starts, desc=desc, disable=not progress, leave=False):
        indices = order[start : start + batch_size]
        ids = encode_examples(encoder, [examples[i] for i in indices], config.max_lengths, config.max_evidence, task=config.task)
        counted = count_ids(ids, unknown)
        tokens, unknowns = tokens + counted[0], unknowns + counted[1]
        outputs = session.run(list(config.outputs[: 2 if evidence is not None else 1]), dict(zip(config.inputs, ids)))
        out = outputs[0]
        if logits is None:
            logits = np.empty((len(examples), out.shape[1]), dtype=np.float32)
        logits[indices] = out
        if evidence is not None:
            for row, i in enumerate(indices):
                evidence[i] = outputs[1][row, : len(examples[i].evidence)]
    if logits is None:
        logits = np.empty((0, len(config.labels)), dtype=np.float32)
    return Scored(logits, tokens, unknowns, evidence)


# --- a ranking bundle (a task without logits: rerank) ----------------------------------------

def score_rankings(session: Any, encoder: TextEncoder, config: BundleConfig, examples: Sequence[PairExample],
                   desc: str | None = None, progress: bool = True) -> tuple[np.ndarray, Scored]:
    """Each pair's score from a rerank bundle's graph, in example order: the candidates of one
    question (their premise) go in as one list of texts, at most the bundle's max_evidence per
    call; and the unknown-id counts."""
    unknown = np.array(unknown_ids(encoder), dtype=np.int64)
    query_input, texts_input = config.inputs
    groups: dict[str, list[int]] = {}
    for i, example in enumerate(examples):
        groups.setdefault(example.premise, []).append(i)
    scores = np.empty(len(examples), dtype=np.float64)
    tokens = unknowns = 0
    for query, members in tqdm(groups.items(), desc=desc, disable=not progress, leave=False):
        query_ids = pad_2d(encoder.encode([query], config.max_lengths[query_input]).ids)
        for start in range(0, len(members), config.max_evidence):
            chunk = members[start : start + config.max_evidence]
            texts_ids = pad_3d([encoder.encode([examples[i].hypothesis for i in chunk], config.max_lengths[texts_input]).ids])
            counted = count_ids((query_ids, texts_ids), unknown)
            tokens, unknowns = tokens + counted[0], unknowns + counted[1]
            [out] = session.run(list(config.outputs), {query_input: query_ids, texts_input: texts_ids})
            scores[chunk] = out[0, : len(chunk)]
    return scores, Scored(np.empty((0, 0)), tokens, unknowns)


def build_ranking_card(bundle_dir: Path, config: BundleConfig, splits: DatasetSplits, threads: int = 1,
                       progress: bool = True, failure_modes: Sequence[str] = ()) -> dict[str, Any]:
    """The card of a rerank bundle trained on answer-selection pairs (WikiQA): MAP and MRR of
    its graph's scores on dev and test (questions with a correct answer), and the unknown-token
    share. No temperature: the service answers sigmoid(score) or the raw log-odds, as TEI does."""
    from training.pair_evaluation import POSITIVE_LABEL, ranking_metrics

    bundle = load_bundle(bundle_dir)
    encoder = TextEncoder.from_file(bundle.tokenizer_path)
    session = open_session(bundle.model_path, threads)
    in_domain, unknown_share = {}, {}
    for part in ("dev", "test"):
        examples = getattr(splits, part)
        scores, scored = score_rankings(session, encoder, config, examples, desc=f"{config.name}: {part}", progress=progress)
        in_domain[part] = ranking_metrics([e.premise for e in examples], [e.label == POSITIVE_LABEL for e in examples],
                                          scores.tolist())
        in_domain[part]["pairs"] = len(examples)
        unknown_share[f"in_domain_{part}"] = scored.unknown_share
    return {
        "training_data": {"dataset": splits.name, "train_examples": len(splits.train), "description": splits.description},
        "in_domain": in_domain,
        "ood_dev": {},
        "unknown_token_share": {"in_domain_test": unknown_share["in_domain_test"]},
        "calibration": {"temperature": 1.0, "fitted_on": "not fitted: a reranker answers sigmoid(log-odds), or the "
                                                         "log-odds with raw_scores"},
        "known_failure_modes": list(failure_modes),
    }


# --- the card -------------------------------------------------------------------------------

def _in_domain_metrics(logits: np.ndarray, gold: np.ndarray, labels: Sequence[str]) -> dict[str, Any]:
    from sklearn.metrics import f1_score

    predicted = logits.argmax(axis=1)
    return {
        "examples": int(len(gold)),
        "accuracy": float((predicted == gold).mean()),
        "macro_f1": float(f1_score(gold, predicted, labels=list(range(len(labels))), average="macro", zero_division=0)),
    }


def _accuracy_by_source(logits: np.ndarray, gold: np.ndarray, sources: Sequence[str]) -> dict[str, dict[str, Any]]:
    """examples and accuracy of each source of a mixed split, in first-seen order."""
    sources_arr = np.asarray(sources)
    correct = logits.argmax(axis=1) == gold
    return {str(name): {"examples": int((sources_arr == name).sum()), "accuracy": float(correct[sources_arr == name].mean())}
            for name in dict.fromkeys(sources_arr.tolist())}


def card_temperature(logits: np.ndarray, gold: np.ndarray, fitted_on: str) -> dict[str, Any]:
    """The temperature the card gives the service, fitted on `logits` (dev) by NLL and bounded:
    `{"temperature", "fitted_on", and "fitted_temperature" + "floor" when the floor applied}`.

    When every gold logit is the row's strict maximum (every answer right), the NLL falls
    without end as T -> 0, so a fit would stop at the search bound (~0.02) and the service would
    answer 1.0 for everything, wrong answers included: not fitted, T = 1."""
    gold = np.asarray(gold, dtype=np.int64)
    logits = np.asarray(logits, dtype=np.float64)
    rows = np.arange(len(gold))
    others = logits.copy()
    others[rows, gold] = -np.inf
    if len(gold) and bool((logits[rows, gold] > others.max(axis=1)).all()):
        return {"temperature": 1.0,
                "fitted_on": f"not fitted: all {len(gold)} {fitted_on} answers are right, so the likelihood has no "
                             "finite best temperature (it improves without end as T -> 0, toward a score of 1.0 for "
                             "every answer, wrong ones included); T = 1, the network's own scores"}
    fitted = fit_temperature(logits, gold)
    if fitted < MIN_TEMPERATURE:
        return {"temperature": MIN_TEMPERATURE, "fitted_on": fitted_on, "fitted_temperature": fitted,
                "floor": MIN_TEMPERATURE}
    return {"temperature": fitted, "fitted_on": fitted_on}


def calibration_warnings(fit: dict[str, Any], ece_before: dict[str, float], ece_after: dict[str, float],
                         dev_examples: int, held_out: bool = True) -> list[str]:
    """What a reader of the card should know about its temperature (`fit`: card_temperature's):
    the floor raised it, or it makes the held-out (in-domain test) ECE worse than T = 1
    (`held_out` False: it was fitted on the test split, so nothing is held out to check)."""
    warnings = []
    if "floor" in fit:
        warnings.append(f"the temperature fitted on {dev_examples} examples, {fit['fitted_temperature']:.4g}, is "
                        f"below the floor {fit['floor']}: {fit['floor']} is used (a lower one sharpens the scores "
                        "toward 1.0 beyond what a small dev split can show)")
    temperature = fit["temperature"]
    before, after = ece_before["in_domain_test"], ece_after["in_domain_test"]
    if held_out and temperature != 1.0 and after > before:
        warnings.append(f"the temperature {temperature:.4g} makes the held-out in-domain test ECE worse: {before:.4f} "
                        f"-> {after:.4f} (dev {ece_before['in_domain_dev']:.4f} -> {ece_after['in_domain_dev']:.4f}, "
                        f"fitted on {dev_examples} examples); a larger dev split fits it better, or set "
                        "calibration.temperature to 1 in config.json to serve the network's own scores")
    return warnings


def _ood_ece(ood: OodSet, logits: np.ndarray, labels: Sequence[str], temperature: float) -> float:
    predicted, confidence = ood.confidences(calibrated_probs(logits, temperature), labels)
    return ece_from_confidence(confidence, predicted == ood.gold(), ECE_BINS)


def _bundle_scorer(bundle: Bundle, threads: int, progress: bool) -> Callable[[Sequence[Example], str], Scored]:
    """run(examples, what): the bundle's ONNX graph scores `examples`, logged under `what`."""
    config = bundle.config
    encoder = TextEncoder.from_file(bundle.tokenizer_path)
    session = open_session(bundle.model_path, threads)

    def run(examples: Sequence[Example], what: str) -> Scored:
        t0 = time.perf_counter()
        scored = score_examples(session, encoder, config, examples, desc=f"{config.name}: {what}", progress=progress)
        log.info("scored", extra={"bundle_name": config.name, "set": what, "examples": len(examples),
                                  "seconds": round(time.perf_counter() - t0, 1), "unknown_share": round(scored.unknown_share, 5)})
        return scored

    return run


def _in_domain_ece(scored: dict[str, Scored], gold: dict[str, np.ndarray], temperature: float) -> dict[str, float]:
    """ECE of the in-domain dev and test scores at `temperature` (1.0: the network's own)."""
    return {f"in_domain_{part}": expected_calibration_error(calibrated_probs(scored[part].logits, temperature), gold[part], ECE_BINS)
            for part in ("dev", "test")}


def _card_data(bundle_dir: Path, raw: dict[str, Any], splits: DatasetSplits | None, recipe: Any,
               dataset: str | None, cache_dir: str | Path | None) -> tuple[DatasetSplits, dict[str, Any] | None]:
    """The data a card is measured on (build_card's `splits`, `recipe` or `dataset`, else the one
    the bundle records) and, for a recipe on the user's own files, those files for the card."""
    files: dict[str, Any] | None = None
    if recipe is not None and splits is None:
        if dataset is not None:
            raise ValueError("give --recipe or --dataset, not both")
        if isinstance(recipe, (str, Path)):
            from training.recipes import load_recipe

            recipe = load_recipe(recipe)
        splits = recipe_splits(recipe, cache_dir)
        if recipe.data.dataset is None:
            files = _recipe_files(recipe, raw)
    if splits is None:
        from training.datasets import load_dataset

        dataset = dataset or resolve_dataset(raw, bundle_dir)
        splits = load_dataset(dataset, cache_dir=cache_dir)
        names = recorded_label_names(raw, bundle_dir)
        if names:
            splits = rename_labels(splits, names)
    return splits, files


def _score_ood_sets(config: BundleConfig, run: Callable[[Sequence[Example], str], Scored], ood_dir: str | Path | None,
                    max_examples: int | None, temperature: float, unknown_share: dict[str, float],
                    ece_before: dict[str, float], ece_after: dict[str, float]) -> dict[str, Any]:
    """Each out-of-domain set the model's labels can answer, scored by `run`: its metrics (returned)
    and, added in place under its name, its unknown-token share and ECE before/after `temperature`."""
    labels = list(config.labels)
    ood_metrics: dict[str, Any] = {}
    for ood in ood_sets(config.task, root=ood_dir, max_examples=max_examples):
        if not ood.fits(labels):
            log.info("ood set skipped: the model's labels cannot answer it", extra={"bundle_name": config.name, "set": ood.name, "labels": labels})
            continue
        result = run(ood.examples, f"ood {ood.name}")
        ood_metrics[ood.name] = ood.metrics(result.logits, labels)
        unknown_share[ood.name] = result.unknown_share
        ece_before[ood.name] = _ood_ece(ood, result.logits, labels, 1.0)
        ece_after[ood.name] = _ood_ece(ood, result.logits, labels, temperature)
    return ood_metrics


def build_card(
    bundle_dir: str | Path,
    dev_split: str = "dev",
    ood_dir: str | Path | None = None,
    failure_modes: Sequence[str] | None = None,
    dataset: str | None = None,
    cache_dir: str | Path | None = None,
    max_ood_examples: int | None = None,
    threads: int = 1,
    progress: bool = True,
    splits: DatasetSplits | None = None,
    recipe: Any = None,
) -> dict[str, Any]:
    """The `card` object for the bundle at `bundle_dir` (see the module docstring). The
    temperature is fitted on the in-domain `dev_split`; `failure_modes` None keeps the
    bundle's existing list. `splits` (already loaded data) skips the dataset lookup; `recipe`
    (a training.recipes.Recipe, or a path to one) reads its [data]: a named dataset or the
    user's own train/dev/test files."""
    started = time.perf_counter()
    bundle_dir = Path(bundle_dir)
    bundle = load_bundle(bundle_dir)
    config = bundle.config
    raw = json.loads((bundle_dir / CONFIG_FILE).read_text(encoding="utf-8"))
    splits, files = _card_data(bundle_dir, raw, splits, recipe, dataset, cache_dir)
    dataset = splits.name
    if failure_modes is None:
        failure_modes = list((raw.get("card") or {}).get("known_failure_modes") or [])
    if not TASKS[config.task].labelled:  # a reranker: scored by MAP/MRR over each question's candidates
        return build_ranking_card(bundle_dir, config, splits, threads, progress, failure_modes)
    if splits.task != config.task or list(splits.labels) != list(config.labels):
        raise ValueError(f"{bundle_dir}: dataset {dataset!r} ({splits.task}, {splits.labels}) does not match the bundle ({config.task}, {config.labels})")
    if dev_split not in ("train", "dev", "test"):
        raise ValueError(f"--dev-split must be train, dev or test, not {dev_split!r}")
    run = _bundle_scorer(bundle, threads, progress)
    labels = list(config.labels)
    parts = {"dev": getattr(splits, dev_split), "test": splits.test}
    scored = {part: run(examples, f"in-domain {name}") for (part, examples), name in zip(parts.items(), (dev_split, "test"))}
    gold = {part: label_ids(examples, labels) for part, examples in parts.items()}
    fitted_on = "in-domain dev" if dev_split == "dev" else f"in-domain {dev_split}"
    fit = card_temperature(scored["dev"].logits, gold["dev"], fitted_on)
    temperature = fit["temperature"]

    in_domain = {part: _in_domain_metrics(scored[part].logits, gold[part], labels) for part in parts}
    for part, split_name in (("dev", dev_split), ("test", "test")):
        if splits.sources.get(split_name):  # a mixed dataset: each source's accuracy too
            in_domain[part]["by_source"] = _accuracy_by_source(scored[part].logits, gold[part], splits.sources[split_name])
    unknown_share = {"in_domain_test": scored["test"].unknown_share}
    ece_before = _in_domain_ece(scored, gold, 1.0)
    ece_after = _in_domain_ece(scored, gold, temperature)
    ood_metrics = _score_ood_sets(config, run, ood_dir, max_ood_examples, temperature,
                                  unknown_share, ece_before, ece_after)

    warnings = calibration_warnings(fit, ece_before, ece_after, len(gold["dev"]), held_out=dev_split != "test")
    for warning in ([fit["fitted_on"]] if fit["fitted_on"] != fitted_on else []) + warnings:  # not fitted: why
        log.warning("calibration", extra={"bundle_name": config.name, "warning": warning})
    card = {
        "training_data": {"dataset": splits.name, "train_examples": len(splits.train), "description": splits.description,
                          **({"files": files} if files is not None else {})},
        "in_domain": {"dev": in_domain["dev"], "test": in_domain["test"]},
        "ood_dev": ood_metrics,
        "unknown_token_share": unknown_share,
        "calibration": {
            **fit,
            "ece_before": ece_before,
            "ece_after": ece_after,
            "bins": ECE_BINS,
            "warnings": warnings,
        },
        "known_failure_modes": list(failure_modes),
    }
    log.info("card built", extra={"bundle_name": config.name, "dataset": splits.name, "temperature": round(temperature, 4),
                                  "test_accuracy": round(in_domain["test"]["accuracy"], 4),
                                  "ood_accuracy": {k: round(v["accuracy"], 4) for k, v in ood_metrics.items()},
                                  "seconds": round(time.perf_counter() - started, 1)})
    return card


def write_card(bundle_dir: str | Path, card: dict[str, Any]) -> Path:
    """Set `card` in the bundle's config.json, keeping every other key and their order; the
    new file is validated as a BundleConfig and renamed into place atomically."""
    path = Path(bundle_dir) / CONFIG_FILE
    raw = json.loads(path.read_text(encoding="utf-8"))
    raw["card"] = card
    # pydantic's JSON writer, as export/bundle.py writes config.json (same number formatting)
    text = pydantic_core.to_json(raw, indent=2).decode("utf-8") + "\n"
    staging = path.with_name(f".{CONFIG_FILE}.partial")
    staging.write_text(text, encoding="utf-8")
    try:
        read_config(staging)  # raises BundleError on an invalid card
        os.replace(staging, path)
    finally:
        staging.unlink(missing_ok=True)
    load_bundle(bundle_dir)
    log.info("card written", extra={"config": str(path)})
    return path


__all__ = ["build_card", "card_temperature", "calibration_warnings", "write_card", "recipe_splits", "resolve_dataset", "score_examples", "unknown_ids"]
