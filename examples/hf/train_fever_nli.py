"""Train a small BERT pair classifier on FEVER from scratch, on CPU, in a fixed time: the model
of the "bring your own transformer" journey (docs/transformers.md), made here because no
pretrained model can be downloaded. A fine-tuned model of your own takes its place unchanged.

    nice -n 19 .venv/bin/python -m examples.hf.train_fever_nli --minutes 10 --out /tmp/hf-journey/fever-bert

What it does, with the project's own FEVER reader (training/fever.py), so its dev claims are the
ones `attserve train --dataset fever` holds out (same split, same seed, same evidence lists):

1. reads `fever/train.csv.xz`, splits claims train / dev / test by fact group (split_fever), and
   builds each claim's evidence list (gold sentences among distractors; NOT ENOUGH INFO claims get
   sentences that do not settle them) with build_evidence_lists;
2. turns lists into (evidence sentence, claim) pairs, premise first as /verify reads them: a gold
   sentence takes its claim's label, any other sentence NOT ENOUGH INFO;
3. trains a WordPiece tokenizer (`tokenizers`) on the train claims and sentences, and a
   BertForSequenceClassification from a config, for `--minutes` of wall time;
4. saves model + fast tokenizer (save_pretrained) to `--out`, the dev claims with their evidence
   lists as JSONL to `--dev-out` (the /verify measurement's input), and the dev pair accuracy in
   `--out`/fever_training.json.

The labels are named in NLI terms (SUPPORTS = ENTAILMENT, REFUTES = CONTRADICTION, NOT ENOUGH
INFO = NEUTRAL) so that one export imports as `--task entailment` and `--task verification`.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

ID2LABEL = {0: "ENTAILMENT", 1: "NEUTRAL", 2: "CONTRADICTION"}
LABEL_OF_FEVER = {"SUPPORTS": 0, "NOT ENOUGH INFO": 1, "REFUTES": 2}
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def read_split(data: Path, train_claims: int, seed: int):
    """(train examples, dev examples): evidence lists built as the project's `fever` dataset
    builds them; train on a sample of `train_claims` claims (enough for a 10-minute budget)."""
    from training.datasets import SPLIT_SEED
    from training.fever import DEV_FRACTION, TEST_FRACTION, build_evidence_lists, read_fever, split_fever

    claims, _ = read_fever(data)
    train, dev, _test = split_fever(claims, seed=SPLIT_SEED, dev_fraction=DEV_FRACTION, test_fraction=TEST_FRACTION)
    train = random.Random(seed).sample(train, min(train_claims, len(train)))
    return (list(zip(train, build_evidence_lists(train, seed=SPLIT_SEED, split="train"), strict=True)),
            list(zip(dev, build_evidence_lists(dev, seed=SPLIT_SEED, split="dev"), strict=True)))


def pairs_of(claims_and_lists) -> list[tuple[str, str, int]]:
    """(sentence, claim, label) per evidence sentence: gold sentences carry the claim's label."""
    out = []
    for claim, example in claims_and_lists:
        gold = set(claim.evidence)
        for sentence in example.evidence:
            label = LABEL_OF_FEVER[claim.label] if sentence in gold else LABEL_OF_FEVER["NOT ENOUGH INFO"]
            out.append((sentence, claim.claim, label))
    return out


def train_tokenizer(texts: list[str], vocab_size: int, max_length: int):
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    tok.train_from_iterator(texts, trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=SPECIALS))
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    tok.enable_truncation(max_length, strategy="longest_first")
    return tok


def encode(tok, pairs: list[tuple[str, str, int]]):
    """Each pair's (ids, type ids, label), the template and truncation applied."""
    encodings = tok.encode_batch([(a, b) for a, b, _ in pairs])
    return [(e.ids, e.type_ids, label) for e, (_, _, label) in zip(encodings, pairs, strict=True)]


def batch_tensors(rows):
    """Right-padded input_ids / token_type_ids / attention_mask and labels ([PAD] is id 0)."""
    import torch

    length = max(len(ids) for ids, _, _ in rows)
    ids = torch.zeros((len(rows), length), dtype=torch.long)
    types = torch.zeros_like(ids)
    mask = torch.zeros_like(ids)
    for i, (row_ids, row_types, _) in enumerate(rows):
        ids[i, : len(row_ids)] = torch.tensor(row_ids)
        types[i, : len(row_types)] = torch.tensor(row_types)
        mask[i, : len(row_ids)] = 1
    labels = torch.tensor([label for _, _, label in rows])
    return {"input_ids": ids, "token_type_ids": types, "attention_mask": mask}, labels


def build_model(vocab_size: int, args):
    from transformers import BertConfig, BertForSequenceClassification

    config = BertConfig(vocab_size=vocab_size, hidden_size=args.hidden, num_hidden_layers=args.layers,
                        num_attention_heads=args.hidden // 64 or 1, intermediate_size=4 * args.hidden,
                        max_position_embeddings=args.max_length, pad_token_id=0, id2label=ID2LABEL,
                        label2id={v: k for k, v in ID2LABEL.items()})
    return BertForSequenceClassification(config)


def length_grouped(rows, batch_size: int, rng: random.Random, window: int = 64):
    """One epoch's batches in random order, each of rows of similar length (sorted within windows
    of `window` batches), so a batch pads little: half the padded tokens of random batches."""
    rows = rows[:]
    rng.shuffle(rows)
    batches = []
    for start in range(0, len(rows), window * batch_size):
        chunk = sorted(rows[start : start + window * batch_size], key=lambda row: len(row[0]))
        batches += [chunk[k : k + batch_size] for k in range(0, len(chunk) - batch_size + 1, batch_size)]
    rng.shuffle(batches)
    return batches


def fit(model, rows, args) -> dict:
    """AdamW with warm-up, the learning rate decayed linearly over the wall-clock budget; batches of
    similar lengths; with `balance`, the loss weighs each label alike."""
    import torch

    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    counts = torch.bincount(torch.tensor([label for _, _, label in rows]), minlength=len(ID2LABEL)).double()
    # each label weighs as much in the loss (REFUTES pairs are 13% of FEVER's, NEUTRAL 54%)
    weight = (counts.sum() / (len(counts) * counts)).float() if args.balance else None
    rng = random.Random(args.seed)
    started, step, seen, budget = time.monotonic(), 0, 0, args.minutes * 60.0
    model.train()
    while (elapsed := time.monotonic() - started) < budget:
        for batch in length_grouped(rows, args.batch_size, rng):
            elapsed = time.monotonic() - started
            if elapsed >= budget:
                break
            for group in optimizer.param_groups:
                group["lr"] = args.lr * min(1.0, (step + 1) / args.warmup) * max(0.0, 1.0 - elapsed / budget)
            feeds, labels = batch_tensors(batch)
            loss = torch.nn.functional.cross_entropy(model(**feeds).logits, labels, weight=weight)
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            step, seen = step + 1, seen + len(labels)
            if step % 200 == 0:
                print(f"step {step}  {elapsed:.0f} s  loss {loss.item():.3f}  {seen / len(rows):.2f} epochs", flush=True)
    model.eval()
    return {"steps": step, "pairs_seen": seen, "epochs": round(seen / len(rows), 3), "seconds": round(time.monotonic() - started, 1)}


def accuracy(model, rows, batch_size: int = 128) -> dict:
    import torch

    correct, per_label = 0, {k: [0, 0] for k in ID2LABEL}
    with torch.inference_mode():
        for start in range(0, len(rows), batch_size):
            feeds, labels = batch_tensors(rows[start : start + batch_size])
            predicted = model(**feeds).logits.argmax(-1)
            correct += int((predicted == labels).sum())
            for p, g in zip(predicted.tolist(), labels.tolist(), strict=True):
                per_label[g][0] += int(p == g)
                per_label[g][1] += 1
    return {"pairs": len(rows), "accuracy": round(correct / len(rows), 4),
            "recall": {ID2LABEL[k]: round(c / n, 4) for k, (c, n) in per_label.items() if n}}


def save(model, tok, out: Path, max_length: int) -> None:
    from transformers import PreTrainedTokenizerFast

    hf_tok = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                                     sep_token="[SEP]", mask_token="[MASK]", model_max_length=max_length)
    model.save_pretrained(out)
    hf_tok.save_pretrained(out)


def write_dev(dev, path: Path) -> None:
    """The dev claims as /verify's input plus the answer: {claim, evidence, label, gold}."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for claim, example in dev:
            gold = [s in set(claim.evidence) for s in example.evidence]
            f.write(json.dumps({"claim": claim.claim, "evidence": list(example.evidence), "label": claim.label,
                                "gold": gold}) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=Path("../shared/data/fever/train.csv.xz"))
    parser.add_argument("--out", type=Path, default=Path("/tmp/hf-journey/fever-bert"))
    parser.add_argument("--dev-out", type=Path, default=Path("/tmp/hf-journey/fever-dev.jsonl"))
    parser.add_argument("--minutes", type=float, default=10.0, help="wall-clock training budget")
    parser.add_argument("--train-claims", type=int, default=40_000)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--max-length", type=int, default=128, help="tokens per pair, special tokens included")
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--warmup", type=int, default=300)
    parser.add_argument("--balance", action=argparse.BooleanOptionalAction, default=True,
                        help="weigh each label's pairs equally in the loss")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    started = time.monotonic()
    train, dev = read_split(args.data, args.train_claims, args.seed)
    train_pairs, dev_pairs = pairs_of(train), pairs_of(dev)
    texts = [c.claim for c, _ in train] + sorted({s for c, e in train for s in e.evidence})
    tok = train_tokenizer(texts, args.vocab_size, args.max_length)
    train_rows, dev_rows = encode(tok, train_pairs), encode(tok, dev_pairs)
    print(f"{len(train)} train claims -> {len(train_rows)} pairs, {len(dev)} dev claims -> {len(dev_rows)} pairs, "
          f"vocab {tok.get_vocab_size()}, data ready in {time.monotonic() - started:.0f} s", flush=True)
    model = build_model(tok.get_vocab_size(), args)
    report = {"training": fit(model, train_rows, args), "dev": accuracy(model, dev_rows),
              "train_claims": len(train), "dev_claims": len(dev), "args": {k: str(v) for k, v in vars(args).items()}}
    print(f"dev pair accuracy {report['dev']['accuracy']:.4f} over {len(dev_rows)} pairs, recall {report['dev']['recall']}")
    save(model, tok, args.out, args.max_length)
    write_dev(dev, args.dev_out)
    (args.out / "fever_training.json").write_text(json.dumps(report, indent=2) + "\n")
    print(f"saved {args.out} and {args.dev_out}")


if __name__ == "__main__":
    main()
