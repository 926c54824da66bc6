"""The reliability runs' requests and answer checks: requests generated from what a repository
serves (every bundle's task, limits and tokenizer vocabulary: words the models know, plus
lengths past each max length so truncation is exercised), and whether an answer is complete and
equal to its input's solo answer."""

from __future__ import annotations

import json
import logging
import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from bench.loadgen import Outcome
from core.bundle import CONFIG_FILE, TOKENIZER_FILE, read_config
from core.tasks import TASKS
from core.tokenization import PAD_TOKEN, TextEncoder, UNK_TOKEN
from service.http.schemas import TASK_SCHEMAS


log = logging.getLogger("bench.reliability")

# Scores of a batched answer may differ from the solo answer by float reassociation only.
SCORE_TOLERANCE = 1e-5


@dataclass(frozen=True)
class ModelSpec:
    name: str
    task: str
    max_lengths: dict[str, int]
    max_evidence: int | None
    words: tuple[str, ...]


@dataclass(frozen=True)
class Request:
    """One HTTP request and, for each of its inputs in answer order, the body that asks for
    that input alone (its solo request)."""

    path: str
    body: dict
    solo: tuple[str, ...]  # JSON bodies


def repository_models(repository: Path, names: Sequence[str] | None = None) -> list[ModelSpec]:
    """The bundles of a repository (valid config.json and tokenizer only), by name."""
    out = []
    for path in sorted(p for p in Path(repository).iterdir() if p.is_dir() and not p.name.startswith(".")):
        try:
            config = read_config(path / CONFIG_FILE)
            vocab = TextEncoder.from_file(path / TOKENIZER_FILE).tokenizer.get_vocab()
        except Exception as exc:  # BundleError, OSError, and tokenizers' own plain Exception
            log.warning("bundle skipped", extra={"path": str(path), "error": str(exc)})
            continue
        if names and config.name not in names:
            continue
        words = tuple(sorted(w for w in vocab if w not in (PAD_TOKEN, UNK_TOKEN)))
        out.append(ModelSpec(config.name, config.task, dict(config.max_lengths), config.max_evidence, words))
    if not out:
        raise RuntimeError(f"no servable bundle in {repository}")
    return out


class WorkloadMaker:
    """Random but reproducible requests over the given models. Text lengths run from one word
    to past each field's max length (truncation), evidence counts from 1 to max_evidence."""

    def __init__(self, models: Sequence[ModelSpec], seed: int = 0) -> None:
        self.models = list(models)
        self.rng = random.Random(seed)

    def _text(self, model: ModelSpec, max_length: int) -> str:
        n = self.rng.randint(1, max(2, int(max_length * 1.25)))
        words = [self.rng.choice(model.words) for _ in range(n)]
        if self.rng.random() < 0.1:
            words[self.rng.randrange(n)] = "zzqx"  # out of vocabulary: [UNK]
        return " ".join(words)

    def input_of(self, model: ModelSpec) -> dict:
        """One input of the model's task, a text per field (core.tasks); a list field gets 1 to
        max_evidence texts."""
        out: dict = {}
        for field in TASKS[model.task].fields:
            limit = model.max_lengths[field.input]
            if field.many:
                out[field.name] = [self._text(model, limit) for _ in range(self.rng.randint(1, model.max_evidence))]
            else:
                out[field.name] = self._text(model, limit)
        return out

    def request(self, model: ModelSpec, inputs: int = 1) -> Request:
        """A request of `inputs` inputs; a task without a batch form (rerank's TEI contract)
        always gets one."""
        path = TASKS[model.task].endpoint
        if not TASK_SCHEMAS[model.task].has_batch_form:
            inputs = 1
        xs = [self.input_of(model) for _ in range(inputs)]
        solo = tuple(json.dumps({**x, "model": model.name}) for x in xs)
        body = {**xs[0], "model": model.name} if inputs == 1 else {"inputs": xs, "model": model.name}
        return Request(path, body, solo)

    def mixed(self, n: int, multi_every: int = 7, multi_inputs: int = 3) -> list[Request]:
        """n requests cycling over the models; every `multi_every`-th one carries several inputs."""
        return [self.request(self.models[i % len(self.models)], multi_inputs if i % multi_every == 0 else 1)
                for i in range(n)]



def answer_problem(answer: Any) -> str | None:
    """Why an inference answer is not a complete prediction, or for a ranking task (rerank,
    TEI's answer) not a complete ranking of the texts, best first (None when it is)."""
    if isinstance(answer, list):
        if not all(isinstance(r, dict) and isinstance(r.get("score"), (int, float)) for r in answer):
            return "a ranking entry without a score"
        if sorted(r.get("index") for r in answer) != list(range(len(answer))):
            return "the ranking does not list every text once"
        scores = [r["score"] for r in answer]
        return None if scores == sorted(scores, reverse=True) else "the ranking is not best first"
    if not isinstance(answer, dict):
        return "not a JSON object"
    scores = answer.get("scores")
    if not isinstance(scores, dict) or not scores or answer.get("label") not in scores:
        return "no scores or label"
    if not math.isclose(sum(scores.values()), 1.0, abs_tol=1e-5):
        return "scores do not sum to 1"
    if not isinstance(answer.get("model"), str) or not isinstance(answer.get("truncated"), bool):
        return "no model or truncated flag"
    return None


def answers_of(outcome: Outcome) -> list:
    """The answers of a request's inputs, in order (a ranking answers its one input)."""
    body = outcome.body
    return body["results"] if isinstance(body, dict) and "results" in body else [body]


def difference(got: dict | list, solo: dict | list) -> float | None:
    """Largest score difference between an answer and the solo answer of its input (None
    when they disagree on anything but float noise: model, labels, truncation, evidence count;
    for a ranking, the texts it ranks)."""
    if isinstance(solo, list):
        if not isinstance(got, list):
            return None
        mine, alone = {r["index"]: r["score"] for r in got}, {r["index"]: r["score"] for r in solo}
        return max(abs(mine[i] - alone[i]) for i in alone) if mine.keys() == alone.keys() and alone else None
    if (got.get("model"), got.get("truncated"), list(got.get("scores", {}))) != \
            (solo.get("model"), solo.get("truncated"), list(solo.get("scores", {}))):
        return None
    diffs = [abs(got["scores"][k] - solo["scores"][k]) for k in solo["scores"]]
    if "evidence_scores" in solo:
        if len(got.get("evidence_scores", [])) != len(solo["evidence_scores"]):
            return None
        diffs += [abs(a - b) for a, b in zip(got["evidence_scores"], solo["evidence_scores"], strict=True)]
    if got.get("label") != solo.get("label") and max(diffs) > SCORE_TOLERANCE:
        return None
    return max(diffs)
