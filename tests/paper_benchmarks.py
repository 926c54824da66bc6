"""Small synthetic copies of the ABCNN paper's benchmark files (SICK.txt, MSRP, WikiQA tsv) in
their real formats (BOM, CRLF, headers), laid out like the shared benchmark folder, so the
readers, loaders and `attserve reproduce` run in CI without the real data."""

from __future__ import annotations

import random
from pathlib import Path

SUBJECTS = ["man", "woman", "boy", "girl", "dog", "cat", "chef", "pilot", "farmer", "singer", "child", "horse"]
VERBS = ["running", "eating", "playing", "sleeping", "jumping", "cooking", "reading", "singing", "swimming", "dancing"]
PLACES = ["park", "kitchen", "field", "street", "beach", "garden", "house", "river", "stage", "forest"]
SICK_HEADER = ("pair_ID\tsentence_A\tsentence_B\tentailment_label\trelatedness_score\tentailment_AB\tentailment_BA\t"
               "sentence_A_original\tsentence_B_original\tsentence_A_dataset\tsentence_B_dataset\tSemEval_set")


def _sentence(rng: random.Random) -> tuple[str, str, str]:
    return rng.choice(SUBJECTS), rng.choice(VERBS), rng.choice(PLACES)


def write_sick(root: Path, sizes: dict[str, int], seed: int = 0) -> Path:
    """SICK.txt (full release, 12 columns, CRLF): entailment = a reworded copy, contradiction =
    the same with a negation, neutral = an unrelated sentence."""
    rng = random.Random(seed)
    lines, pair_id = [SICK_HEADER], 0
    for part, size in sizes.items():
        for i in range(size):
            pair_id += 1
            s, v, p = _sentence(rng)
            a = f"A {s} is {v} in the {p}"
            label = ("ENTAILMENT", "NEUTRAL", "CONTRADICTION")[i % 3]
            if label == "ENTAILMENT":
                b = f"The {s} is {v} in a {p}"
            elif label == "CONTRADICTION":
                b = f"There is no {s} {v} in the {p}"
            else:
                s2, v2, p2 = _sentence(rng)
                b = f"A {s2} is {v2} near the {p2}"
            lines.append(f"{pair_id}\t{a}\t{b}\t{label}\t3.0\tA_x_B\tB_x_A\t{a}\t{b}\tFLICKR\tFLICKR\t{part}")
    path = root / "sick" / "SICK.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(("\r\n".join(lines) + "\r\n").encode("utf-8"))
    return path


def write_msrp(root: Path, train: int, test: int, seed: int = 0) -> tuple[Path, Path]:
    """msr_paraphrase_{train,test}.txt (BOM, header, LF): paraphrase = the same facts reworded."""
    rng = random.Random(seed)
    paths = []
    for split, size in (("train", train), ("test", test)):
        rows = ["Quality\t#1 ID\t#2 ID\t#1 String\t#2 String"]
        for i in range(size):
            s, v, p = _sentence(rng)
            a = f'The {s} was "{v}" at the {p} on Monday.'
            if i % 3:  # two thirds paraphrases, as in MSRP
                quality, b = 1, f"On Monday the {s} was {v} at the {p}."
            else:
                s2, v2, p2 = _sentence(rng)
                quality, b = 0, f"A {s2} kept {v2} by the {p2} last year."
            rows.append(f"{quality}\t{2 * i}\t{2 * i + 1}\t{a}\t{b}")
        path = root / "msrp" / f"msr_paraphrase_{split}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(("\ufeff" + "\n".join(rows) + "\n").encode("utf-8"))
        paths.append(path)
    return paths[0], paths[1]


def write_wikiqa(root: Path, questions: dict[str, int], candidates: int = 5, seed: int = 0) -> dict[str, Path]:
    """WikiQA-{train,dev,test}.tsv (header, CRLF): the answer repeats the question's content
    words, the other candidates share none; every fourth question has no correct answer."""
    rng = random.Random(seed)
    header = "QuestionID\tQuestion\tDocumentID\tDocumentTitle\tSentenceID\tSentence\tLabel"
    paths, qid = {}, 0
    for split, count in questions.items():
        lines = [header]
        for q in range(count):
            qid += 1
            s, v, p = _sentence(rng)
            question = f"where was the {s} {v} ?"
            answerable = q % 4 != 3
            answer_at = rng.randrange(candidates) if answerable else -1
            for c in range(candidates):
                if c == answer_at:
                    sentence, label = f"The {s} was {v} in the {p} .", 1
                else:
                    s2, v2, p2 = rng.choice([x for x in SUBJECTS if x != s]), rng.choice([x for x in VERBS if x != v]), rng.choice(PLACES)
                    sentence, label = f"Some {s2} likes {v2} by a {p2} .", 0
                lines.append(f"Q{qid}\t{question}\tD{qid}\tTitle {qid}\tD{qid}-{c}\t{sentence}\t{label}")
        path = root / "wikiqa" / "WikiQACorpus" / f"WikiQA-{split}.tsv"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(("\r\n".join(lines) + "\r\n").encode("utf-8"))
        paths[split] = path
    return paths


def write_scitail(root: Path, questions: dict[str, int], sentences: int = 4, seed: int = 0) -> dict[str, Path]:
    """scitail/{train,dev}.jsonl.xz (JSON lines, xz): each science question (hypothesis) against
    `sentences` web sentences (premises); the entailing one repeats the question's facts, the
    others are about something else."""
    import json
    import lzma

    rng = random.Random(seed)
    paths = {}
    for split, count in questions.items():
        rows = []
        for q in range(count):
            s, v, p = _sentence(rng)
            hypothesis = f"A {s} is {v} in the {p} in question {split}{q}."
            for k in range(sentences):
                if k == 0:
                    premise, label = f"Web page {split}{q}: the {s} was {v} in a {p}.", "entails"
                else:
                    s2, v2, p2 = rng.choice([x for x in SUBJECTS if x != s]), rng.choice([x for x in VERBS if x != v]), rng.choice(PLACES)
                    premise, label = f"Web page {split}{q}/{k}: some {s2} likes {v2} by a {p2}.", "neutral"
                rows.append({"premise": premise, "hypothesis": hypothesis, "label": label})
        path = root / "scitail" / f"{split}.jsonl.xz"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(lzma.compress("".join(json.dumps(r) + "\n" for r in rows).encode("utf-8")))
        paths[split] = path
    return paths


def write_benchmarks(root: Path) -> Path:
    """All four, a few hundred pairs each."""
    write_sick(root, {"TRAIN": 240, "TRIAL": 60, "TEST": 90})
    write_msrp(root, train=520, test=90)  # 400 become dev, as in the loader
    write_wikiqa(root, {"train": 48, "dev": 16, "test": 20})
    write_scitail(root, {"train": 100, "dev": 20})  # test: 5% of train's questions, as in the loader
    return root
