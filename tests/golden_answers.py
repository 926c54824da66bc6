"""Golden answers of the shipped models (issue 62: "answers byte-identical to today"): a fixed list
of requests, the exact body each answered (status, content type, text) and, per shipped bundle,
the version /v1/models reports. tests/service/test_golden_answers.py sends them again and asserts
every body is byte-equal.

The requests: every `curl ... -d` example of the README's API section (parsed as
tests/service/test_shipped_models.py parses them) and held inputs read deterministically from
/work/shared/data (SNLI dev, SciTail dev, SICK test, MSRP test, FEVER-Symmetric dev, WikiQA test,
MultiNLI mismatched dev; `ATTSERVE_SHARED_DATA` points elsewhere) over every task endpoint,
/zero-shot, /predict, /tokenize and the Open Inference Protocol's infer route of
nli-attconv-advanced: single inputs, `inputs` lists of mixed lengths, `explain: true`, texts past
the max lengths, and 4xx error bodies. The data is read only to BUILD the list; the file keeps
each request's exact body bytes, so re-answering it (after a retrain) needs no data.

Pinned, so that an answer is a function of the request and the bundles alone: the service runs in
process (tests.bundles.running_app) on the CPU, 1 onnxruntime thread per session, one call per
padded shape (`call_overhead_tokens=0`, otherwise measured at warm-up), and requests go one at a
time (a request's batch is its own inputs). Not recorded, because they vary per request or per
start: the response headers (x-total-time, x-queue-time, x-inference-time, traceresponse,
x-attserve-model-version) and the body of /v1/models (warm-up seconds); an OIP request's `id` is
echoed, so it is fixed in the request. No task answer carries an id, a time or a date.

    python -m tests.golden_answers --write                 # new list from README + data, answered by this tree
    python -m tests.golden_answers --update /predict --reason "..."  # re-answer some entries with this tree
    python -m tests.golden_answers --diff                  # what this tree answers differently

The file's header names the commit whose service answered it; an entry answered by another tree
carries `"since"` (that tree's commit) and `"reason"`. The file was answered by the service of
a53a479 (before issue 62's dataplane) with this generator run by path, that tree first on the path:

    git worktree add /tmp/old a53a479 && cd /tmp/old
    PYTHONPATH=/tmp/old python /work/main/tests/golden_answers.py --write   # README and bundles: /work/main's

then the entries a53a479 could not answer (/predict, /zero-shot's batch form) were `--update`d by
the current tree, each with the commit that made the change in its reason.
"""

from __future__ import annotations

import argparse
import asyncio
import difflib
import gzip
import json
import lzma
import math
import os
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REPOSITORY = ROOT / "model_repository"
GOLDEN = ROOT / "tests" / "data" / "golden-answers.jsonl"
DATA = Path(os.environ.get("ATTSERVE_SHARED_DATA", ROOT.parent / "shared" / "data"))
JSON = "application/json"
SETTINGS = {"max_batch_delay_ms": 0.0, "intra_op_threads": 1, "device": "cpu", "call_overhead_tokens": 0.0}
FLOAT_TOLERANCE = 1e-5  # only where the platform differs from the recording's (see differences)


# ---- the held inputs --------------------------------------------------------------------------

def spread(rows: list, n: int) -> list:
    """n rows evenly spaced over `rows` (deterministic, covers the whole file)."""
    return [rows[i * len(rows) // n] for i in range(min(n, len(rows)))]


def jsonl(path: Path) -> list[dict]:
    opener = lzma.open if path.suffix == ".xz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def tsv(path: Path, skip_header: bool) -> list[list[str]]:
    lines = path.read_text(encoding="utf-8-sig").splitlines()[1 if skip_header else 0:]
    return [line.split("\t") for line in lines if line.strip()]


def held_data() -> dict[str, list]:
    snli = jsonl(DATA / "ood-dev" / "snli_1.0_dev.jsonl")
    wikiqa: dict[str, dict] = {}
    for row in tsv(DATA / "wikiqa" / "WikiQACorpus" / "WikiQA-test.tsv", skip_header=True):
        wikiqa.setdefault(row[0], {"query": row[1], "texts": []})["texts"].append(row[5])
    return {
        "snli": [(r["premise"], r["hypothesis"]) for r in spread(snli, 60)],
        "scitail": [(r["premise"], r["hypothesis"]) for r in spread(jsonl(DATA / "scitail" / "dev.jsonl.xz"), 12)],
        "sick": [(r[1], r[2]) for r in spread(tsv(DATA / "sick" / "semeval_split" / "SICK_test_annotated.txt", False), 10)],
        "msrp": [(r[3], r[4]) for r in spread(tsv(DATA / "msrp" / "msr_paraphrase_test.txt", skip_header=True), 30)],
        "fever": [(r["claim"], r["evidence"]) for r in spread(jsonl(DATA / "ood-dev" / "fever_symmetric_v0.2_dev.jsonl"), 36)],
        "wikiqa": spread(list(wikiqa.values()), 16),
        "mnli": [r["premise"] for r in spread(jsonl(DATA / "mnli" / "dev_mismatched.jsonl.xz"), 80)],
    }


# ---- the requests -----------------------------------------------------------------------------

def post(name: str, path: str, body, content_type: str = JSON) -> dict:
    text = body if isinstance(body, str) else json.dumps(body, ensure_ascii=False)
    return {"id": name, "method": "POST", "path": path, "content_type": content_type, "body": text}


def readme_requests() -> list[dict]:
    from tests.service.test_shipped_models import readme_examples

    examples = readme_examples((ROOT / "README.md").read_text("utf-8"))
    return [post(f"readme-line-{line}", path, body) for path, body, _, line, _ in examples]


def pair_requests(data: dict) -> list[dict]:
    """/entailment (every entailment bundle) and /paraphrase: singles, batches, explanations."""
    out = []
    for n, (p, h) in enumerate(data["snli"][:40]):
        model = {} if n % 4 else {"model": "snli-attconv-light"}
        out.append(post(f"entailment-snli-{n}", "/entailment", {"premise": p, "hypothesis": h, **model}))
    for n, (p, h) in enumerate(data["scitail"]):
        out.append(post(f"entailment-scitail-{n}", "/entailment", {"premise": p, "hypothesis": h, "model": "scitail-attconv"}))
    for n, (p, h) in enumerate(data["sick"]):
        out.append(post(f"entailment-sick-{n}", "/entailment", {"premise": p, "hypothesis": h}))
    long = " ".join(data["mnli"][:12])  # past every premise max length: cut, truncated true
    mixed = [{"premise": p, "hypothesis": h} for p, h in data["snli"][40:52]] + [
        {"premise": m, "hypothesis": p} for m, (p, _) in zip(data["mnli"][12:18], data["snli"][52:58])]
    for n, size in enumerate((2, 3, 5, 8, 12)):
        start = 3 * n
        inputs = mixed[start:start + size] + [{"premise": long, "hypothesis": mixed[start]["hypothesis"]}] * (n % 2)
        model = {"model": ("nli-attconv-advanced", "snli-attconv-light", "scitail-attconv")[n % 3]}
        out.append(post(f"entailment-inputs-{n}", "/entailment", {"inputs": inputs, **model}))
    for n, model in enumerate(("nli-attconv-advanced", "snli-attconv-light", "scitail-attconv")):
        p, h = data["snli"][58 - n]
        out.append(post(f"entailment-explain-{n}", "/entailment", {"premise": p, "hypothesis": h, "model": model, "explain": True}))
    out.append(post("entailment-explain-inputs", "/entailment", {"inputs": mixed[:3], "explain": True}))
    out.append(post("entailment-long", "/entailment", {"premise": long, "hypothesis": "Someone said something."}))
    for n, (a, b) in enumerate(data["msrp"][:24]):
        out.append(post(f"paraphrase-msrp-{n}", "/paraphrase", {"sentence1": a, "sentence2": b}))
    batch = [{"sentence1": a, "sentence2": b} for a, b in data["msrp"][24:30]]
    out.append(post("paraphrase-inputs-0", "/paraphrase", {"inputs": batch[:2]}))
    out.append(post("paraphrase-inputs-1", "/paraphrase", {"inputs": batch + [{"sentence1": long, "sentence2": batch[0]["sentence2"]}]}))
    out.append(post("paraphrase-explain", "/paraphrase", {**batch[3], "explain": True}))
    out.append(post("paraphrase-explain-inputs", "/paraphrase", {"inputs": batch[4:], "explain": True}))
    return out


def text_requests(data: dict) -> list[dict]:
    """/classify (both classifiers) and /zero-shot."""
    out = []
    texts = data["mnli"][20:80]
    for n, text in enumerate(texts[:40]):
        model = {"model": "tweets-act"} if n % 2 else {}
        out.append(post(f"classify-{n}", "/classify", {"text": text, **model}))
    long = " ".join(data["mnli"][:60])  # past bbc-act's 400 tokens
    out.append(post("classify-long", "/classify", {"text": long}))
    out.append(post("classify-long-tweets", "/classify", {"text": long, "model": "tweets-act"}))
    for n, size in enumerate((2, 4, 7, 10)):
        inputs = [{"text": t} for t in texts[40 + n:40 + n + size]] + [{"text": long[:200 * (n + 1)]}]
        model = {"model": "tweets-act"} if n % 2 else {}
        out.append(post(f"classify-inputs-{n}", "/classify", {"inputs": inputs, **model}))
    for n, model in enumerate(("bbc-act", "tweets-act")):
        out.append(post(f"classify-explain-{n}", "/classify", {"text": texts[50 + n], "model": model, "explain": True}))
    out.append(post("classify-explain-inputs", "/classify", {"inputs": [{"text": t} for t in texts[52:55]], "explain": True}))
    labels = ["business", "sport", "politics", "technology", "travel", "health"]
    for n, text in enumerate(texts[:12]):
        body = {"text": text, "candidate_labels": labels[: 2 + n % 5], "multi_label": n % 3 == 0}
        if n % 4 == 1:
            body["hypothesis_template"] = "This text is about {}."
        if n % 5 == 2:
            body["model"] = ("scitail-attconv", "snli-attconv-light")[n % 2]
        out.append(post(f"zero-shot-{n}", "/zero-shot", body))
    out.append(post("zero-shot-inputs", "/zero-shot", {"inputs": [
        {"text": texts[12], "candidate_labels": labels[:3]},
        {"text": texts[13], "candidate_labels": ["positive", "negative"], "multi_label": True},
        {"text": long, "candidate_labels": labels}]}))
    return out


def list_requests(data: dict) -> list[dict]:
    """/verify (evidence lists) and /rerank (a query and its texts)."""
    out = []
    fever = data["fever"]
    for n, (claim, evidence) in enumerate(fever[:28]):
        others = [e for _, e in fever[n + 1:n + 1 + n % 4]]
        out.append(post(f"verify-{n}", "/verify", {"claim": claim, "evidence": others[: n % 2] + [evidence] + others[n % 2:]}))
    batch = [{"claim": c, "evidence": [e, fever[(n + 5) % len(fever)][1]][: 1 + n % 2]} for n, (c, e) in enumerate(fever[28:36])]
    out.append(post("verify-inputs-0", "/verify", {"inputs": batch[:3]}))
    out.append(post("verify-inputs-1", "/verify", {"inputs": batch[3:]}))
    out.append(post("verify-explain", "/verify", {**batch[0], "explain": True}))
    out.append(post("verify-explain-inputs", "/verify", {"inputs": batch[1:3], "explain": True}))
    out.append(post("verify-16-evidence", "/verify", {"claim": fever[0][0], "evidence": [e for _, e in fever[:16]]}))
    for n, question in enumerate(data["wikiqa"]):
        body = {"query": question["query"], "texts": question["texts"][:12]}
        if n % 3 == 1:
            body["raw_scores"] = True
        if n % 4 == 2:
            body["return_text"] = True
        out.append(post(f"rerank-{n}", "/rerank", body))
    long = " ".join(data["mnli"][:6])
    out.append(post("rerank-long", "/rerank", {"query": data["wikiqa"][0]["query"], "texts": [long, data["wikiqa"][0]["texts"][0]]}))
    out.append(post("rerank-explain", "/rerank", {**{k: v[:3] if k == "texts" else v for k, v in data["wikiqa"][1].items()},
                                                  "explain": True}))
    return out


def protocol_requests(data: dict) -> list[dict]:
    """/predict (TEI), /tokenize and the Open Inference Protocol's infer route of one model."""
    snli, texts = data["snli"], data["mnli"]
    out = [post("predict-text", "/predict", {"inputs": texts[0]}),
           post("predict-pair", "/predict", {"inputs": list(snli[0])}),
           post("predict-texts", "/predict", {"inputs": texts[1:4]}),
           post("predict-pairs", "/predict", {"inputs": [list(p) for p in snli[1:4]]}),
           post("predict-raw", "/predict", {"inputs": list(snli[4]), "raw_scores": True}),
           post("predict-model", "/predict", {"inputs": texts[4], "model": "tweets-act"}),
           post("predict-paraphrase", "/predict", {"inputs": list(data["msrp"][0]), "model": "paraphrase-attconv"}),
           post("predict-parameters", "/predict", {"inputs": texts[5], "parameters": {"function_to_apply": "none", "top_k": 2}}),
           post("predict-too-long", "/predict", {"inputs": " ".join(texts[:60])}),
           post("predict-bad", "/predict", {"inputs": "x", "truncation_direction": "Left"})]
    claim, evidence = data["fever"][0]
    for n, body in enumerate([
            {"premise": snli[5][0], "hypothesis": snli[5][1]},
            {"premise": " ".join(texts[:12]), "hypothesis": snli[6][1], "model": "snli-attconv-light"},
            {"text": texts[6]}, {"text": texts[7], "model": "tweets-act"},
            {"claim": claim, "evidence": [evidence, data["fever"][1][1]]},
            {"query": data["wikiqa"][2]["query"], "texts": data["wikiqa"][2]["texts"][:3]},
            {"sentence1": data["msrp"][1][0], "sentence2": data["msrp"][1][1]},
            {"inputs": [{"premise": p, "hypothesis": h} for p, h in snli[7:9]]}]):
        out.append(post(f"tokenize-{n}", "/tokenize", body))
    for n, size in enumerate((1, 2, 4, 7)):
        pairs = snli[10 + n:10 + n + size]
        tensors = [{"name": name, "shape": [size], "datatype": "BYTES", "data": [p[i] for p in pairs]}
                   for i, name in enumerate(("premise", "hypothesis"))]
        out.append(post(f"v2-infer-{n}", "/v2/models/nli-attconv-advanced/infer", {"id": f"golden-{n}", "inputs": tensors}))
    out.append(post("v2-infer-unknown-model", "/v2/models/no-such-model/infer", {"inputs": []}))
    out.append(post("v2-infer-wrong-input", "/v2/models/nli-attconv-advanced/infer",
                    {"inputs": [{"name": "text", "shape": [1], "datatype": "BYTES", "data": ["x"]}]}))
    return out


def error_requests(data: dict) -> list[dict]:
    """4xx answers of the task endpoints (their bodies are answers too)."""
    p, h = data["snli"][0]
    long = " ".join(data["mnli"][:12])
    return [
        post("error-missing-field", "/classify", {"txt": "hello"}),
        post("error-empty-text", "/classify", {"text": ""}),
        post("error-not-a-string", "/paraphrase", {"sentence1": 5, "sentence2": "x"}),
        post("error-unknown-model", "/entailment", {"premise": p, "hypothesis": h, "model": "no-such-model"}),
        post("error-wrong-task-model", "/entailment", {"premise": p, "hypothesis": h, "model": "bbc-act"}),
        post("error-truncate-false", "/entailment", {"premise": long, "hypothesis": h, "truncate": False}),
        post("error-rerank-truncate-false", "/rerank", {"query": "q", "texts": [long], "truncate": False}),
        post("error-rerank-no-texts", "/rerank", {"query": "q", "texts": []}),
        post("error-too-much-evidence", "/verify", {"claim": p, "evidence": [h] * 17}),
        post("error-too-many-inputs", "/classify", {"inputs": [{"text": "x"}] * 65}),
        post("error-malformed-json", "/entailment", '{"premise": "a", '),
        post("error-not-json", "/classify", "text=hello", content_type="text/plain"),
        post("error-zero-shot-duplicate-labels", "/zero-shot", {"text": p, "candidate_labels": ["a", "a"]}),
        post("error-tokenize-no-fields", "/tokenize", {"model": "bbc-act"}),
        {"id": "error-get-on-post", "method": "GET", "path": "/classify", "content_type": None, "body": None},
    ]


def build_requests() -> list[dict]:
    data = held_data()
    requests = [*readme_requests(), *pair_requests(data), *text_requests(data), *list_requests(data),
                *protocol_requests(data), *error_requests(data)]
    ids = [r["id"] for r in requests]
    assert len(ids) == len(set(ids)), "request ids must be unique"
    return requests


# ---- answering --------------------------------------------------------------------------------

def service_tree() -> str:
    """The commit of the tree whose `service` package is imported ("+dirty" with local changes)."""
    import service

    where = Path(service.__file__).resolve().parents[1]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=where, capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--", "service", "core"], cwd=where,
                           capture_output=True, text=True).stdout.strip()
    return commit + ("+dirty" if dirty else "")


def platform_key() -> dict:
    """What decides onnxruntime's float kernels: its version and the CPU's vector extensions."""
    import onnxruntime

    flags: set[str] = set()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith(("flags", "Features")):
                flags = set(line.split(":", 1)[1].split())
                break
    wanted = {"avx", "avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "amx_tile", "asimd", "sve"}
    return {"onnxruntime": onnxruntime.__version__, "machine": platform.machine(), "cpu": sorted(flags & wanted)}


async def answer_all(requests: list[dict]) -> tuple[list[dict], dict[str, str]]:
    """Each request's {status, content_type, text}, sent one at a time, and each model's version."""
    from service.settings import Settings
    from tests.bundles import running_app

    async with running_app(Settings(model_repository=REPOSITORY, **SETTINGS)) as (_, client):
        models = (await client.get("/v1/models")).json()["models"]
        versions = {m["name"]: m["version"] for m in models}
        out = []
        for r in requests:
            headers = {"content-type": r["content_type"]} if r["content_type"] else {}
            body = r["body"].encode() if r["body"] is not None else None
            answer = await client.request(r["method"], r["path"], content=body, headers=headers)
            out.append({"status": answer.status_code, "response_type": answer.headers.get("content-type"),
                        "response": answer.text})
        return out, versions


# ---- the file ---------------------------------------------------------------------------------

def read_golden(path: Path = GOLDEN) -> tuple[dict, list[dict]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        header, *entries = (json.loads(line) for line in f)
    return header, entries


def write_golden(header: dict, entries: list[dict], path: Path = GOLDEN) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(x, ensure_ascii=False, sort_keys=False) for x in (header, *entries)]
    data = ("\n".join(lines) + "\n").encode("utf-8")
    if path.suffix == ".gz":
        data = gzip.compress(data, mtime=0)  # mtime 0: the same answers give the same bytes
    path.write_bytes(data)


def same_json_up_to_floats(a, b, tolerance: float) -> bool:
    """Equal JSON with the same key order, floats within `tolerance` (relative, at least absolute)."""
    if isinstance(a, float) or isinstance(b, float):
        return isinstance(a, (int, float)) and isinstance(b, (int, float)) and \
            math.isclose(a, b, rel_tol=tolerance, abs_tol=tolerance)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_json_up_to_floats(x, y, tolerance) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return list(a) == list(b) and all(same_json_up_to_floats(a[k], b[k], tolerance) for k in a)
    return type(a) is type(b) and a == b


def same_answer(want: dict, got: dict, exact: bool) -> bool:
    if (want["status"], want["response_type"]) != (got["status"], got["response_type"]):
        return False
    if exact or want["response"] == got["response"]:
        return want["response"] == got["response"]
    try:
        return same_json_up_to_floats(json.loads(want["response"]), json.loads(got["response"]), FLOAT_TOLERANCE)
    except ValueError:
        return False


def readable(answer: dict) -> list[str]:
    try:
        text = json.dumps(json.loads(answer["response"]), indent=1, ensure_ascii=False)
    except ValueError:
        text = answer["response"]
    return [f"{answer['status']} {answer['response_type']}", *text.splitlines()]


def differences(entries: list[dict], answers: list[dict], exact: bool) -> list[str]:
    """One report per entry whose answer differs, the first with a diff of the two bodies."""
    out = []
    for entry, got in zip(entries, answers):
        if same_answer(entry, got, exact):
            continue
        where = f"{entry['id']}: {entry['method']} {entry['path']} {entry['body']}"
        if not out:
            diff = difflib.unified_diff(readable(entry), readable(got), "recorded", "now", lineterm="", n=2)
            where += "\n" + "\n".join(list(diff)[:80])
        out.append(where)
    return out


def model_changes(header: dict, versions: dict[str, str]) -> list[str]:
    return [f"{name}: recorded {header['models'].get(name)}, now {versions.get(name)}"
            for name in sorted(set(header["models"]) | set(versions)) if header["models"].get(name) != versions.get(name)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="build the request list anew and answer it with this tree")
    mode.add_argument("--update", nargs="+", metavar="PATH_OR_ID",
                      help="re-answer the entries with this path or id with this tree, marked since/reason")
    mode.add_argument("--diff", action="store_true", help="print the entries this tree answers differently")
    parser.add_argument("--reason", help="why the --update entries changed (required with --update)")
    parser.add_argument("--out", type=Path, default=GOLDEN)
    args = parser.parse_args(argv)
    tree = service_tree()
    if args.write:
        entries = build_requests()
        answers, versions = asyncio.run(answer_all(entries))
        header = {"golden": "answers of the shipped models", "commit": tree, "models": versions, "platform": platform_key()}
        write_golden(header, [{**e, **a} for e, a in zip(entries, answers)], args.out)
        print(f"{args.out}: {len(entries)} answers of {tree}", file=sys.stderr)
        return 0
    header, entries = read_golden(args.out)
    picked = [e for e in entries if e["id"] in args.update or e["path"] in args.update] if args.update else entries
    answers, versions = asyncio.run(answer_all(picked))
    if args.diff:
        found = model_changes(header, versions) + differences(picked, answers, exact=True)
        print("\n".join(found) or f"no differences ({len(picked)} answers)")
        return 1 if found else 0
    if not args.reason:
        parser.error("--update needs --reason")
    updated = {e["id"]: {**e, **a, "since": tree, "reason": args.reason} for e, a in zip(picked, answers)}
    write_golden(header, [updated.get(e["id"], e) for e in entries], args.out)
    print(f"{args.out}: {len(updated)} entries re-answered by {tree}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
