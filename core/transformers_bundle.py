"""The second bundle kind: a Hugging Face sequence classifier exported to ONNX
(`attserve bundle import-hf`, docs/transformers.md).

Its graph reads one token sequence per row (`input_ids`, `attention_mask`, and `token_type_ids`
where the graph has it) built by the tokenizer's own template (`[CLS] a [SEP] b [SEP]`,
`<s> a </s></s> b </s>`, ...), and outputs `logits`. The texts of each input are encoded field
by field as for the attserve kind (`FieldEncoding`, so truncation flags, unknown-token shares,
explanation tokens and /tokenize read them unchanged), cut longest-first by the tokenizer itself
so the whole sequence fits the model, and joined by `PairTemplate` when the runtime makes the item.
numpy + tokenizers only (the serving image has no torch).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Sequence

from tokenizers import Tokenizer

from core.tasks import Task, TaskForm, TextField
from core.tokenization import Encoded

KIND = "transformers"
# Their config.json, kept beside ours (which is config.json, the one name the registry reads)
TRANSFORMERS_CONFIG_FILE = "transformers_config.json"
GRAPH_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
LOGITS = "logits"
# verification: the label of a claim its evidence does not decide (a pair model's "neutral")
UNDECIDED_LABEL = "NOT ENOUGH INFO"


class TemplateIds(list):
    """One input's token sequence as the graph reads it (a list of ids), with its token type ids."""

    __slots__ = ("type_ids",)

    def __init__(self, ids: Sequence[int], type_ids: Sequence[int]) -> None:
        super().__init__(ids)
        self.type_ids = list(type_ids)


# a piece of a template: ("A" | "B", type id) for a text, or (token ids, type id) for special tokens
Piece = tuple[Any, int]


def _bert_pieces(cls: list, sep: list, pair: bool, roberta: bool) -> list[Piece]:
    single = [([cls[1]], 0), ("A", 0), ([sep[1]], 0)]
    if not pair:
        return single
    if roberta:  # <s> A </s></s> B </s>, every type id 0
        return single + [([sep[1]], 0), ("B", 0), ([sep[1]], 0)]
    return single + [("B", 1), ([sep[1]], 1)]


def _template_pieces(spec: dict, pair: bool) -> list[Piece]:
    specials = spec.get("special_tokens") or {}
    out: list[Piece] = []
    for piece in spec["pair" if pair else "single"]:
        if "Sequence" in piece:
            out.append((piece["Sequence"]["id"], piece["Sequence"]["type_id"]))
        else:
            token = piece["SpecialToken"]
            out.append((list(specials[token["id"]]["ids"]), token["type_id"]))
    return out


@dataclass(frozen=True)
class PairTemplate:
    """The special tokens a tokenizer's post-processor puts around one text and around a pair,
    applied to ids (`join`), so the runtime builds the sequence from the ids of each text.
    TemplateProcessing, BertProcessing and RobertaProcessing (alone or in a Sequence); a
    tokenizer without a post-processor adds nothing."""

    single: tuple[Piece, ...]
    pair: tuple[Piece, ...]

    @classmethod
    def of(cls, tokenizer: Tokenizer) -> "PairTemplate":
        spec = json.loads(tokenizer.to_str()).get("post_processor")
        processors = spec.get("processors", []) if spec and spec.get("type") == "Sequence" else [spec] if spec else []
        adding = [p for p in processors if p.get("type") != "ByteLevel"]
        if not adding:
            return cls((("A", 0),), (("A", 0), ("B", 1)))
        known = ("TemplateProcessing", "BertProcessing", "RobertaProcessing")
        if len(adding) > 1 or adding[0].get("type") not in known:
            raise ValueError(f"tokenizer post-processor {[p.get('type') for p in adding]} is not one attserve applies "
                             "(TemplateProcessing, BertProcessing, RobertaProcessing)")
        p = adding[0]
        if p["type"] == "TemplateProcessing":
            return cls(tuple(_template_pieces(p, False)), tuple(_template_pieces(p, True)))
        roberta = p["type"] == "RobertaProcessing"
        return cls(tuple(_bert_pieces(p["cls"], p["sep"], False, roberta)),
                   tuple(_bert_pieces(p["cls"], p["sep"], True, roberta)))

    def join(self, a: Sequence[int], b: Sequence[int] | None = None) -> TemplateIds:
        """The sequence of text ids `a` (and `b`) with the template's special tokens."""
        ids: list[int] = []
        types: list[int] = []
        for what, type_id in (self.single if b is None else self.pair):
            part = a if what == "A" else b if what == "B" else what
            ids += part
            types += [type_id] * len(part)
        return TemplateIds(ids, types)


def _unknown_id(tokenizer: Tokenizer) -> int | None:
    model = json.loads(tokenizer.to_str()).get("model") or {}
    if model.get("type") == "Unigram":
        return model.get("unk_id")
    token = model.get("unk_token")
    return tokenizer.token_to_id(token) if token else None


class TemplateEncoder:
    """A transformers bundle's tokenizer.json: the texts of a task's inputs -> their ids, cut
    longest-first so that the template's sequence holds at most `max_length` tokens."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        tokenizer.no_padding()
        tokenizer.no_truncation()
        self.tokenizer = tokenizer
        self.template = PairTemplate.of(tokenizer)
        self.unk_id = _unknown_id(tokenizer)
        # budget -> a copy of the tokenizer that truncates longest-first to it (`_encode`)
        self._cutters: dict[int, Tokenizer] = {}
        self._check_template()

    def _check_template(self) -> None:
        """The template applied to ids must give what the tokenizer gives (a check at load)."""
        a, b = "Hello world, a test.", "Another text"
        for texts in ((a,), (a, b)):
            own = self.tokenizer.encode(*texts, add_special_tokens=True)
            parts = [self.tokenizer.encode(t, add_special_tokens=False).ids for t in texts]
            joined = self.template.join(*parts)
            if list(joined) != own.ids or joined.type_ids != own.type_ids:
                raise ValueError("tokenizer.json's post-processor does not put special tokens around ids the way "
                                 f"attserve applies it: {own.tokens} vs ids {list(joined)}")

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size(with_added_tokens=True)

    def is_unknown(self, token_id: int) -> bool:
        return token_id == self.unk_id

    def specials(self, pair: bool) -> int:
        """Special tokens the template adds around one text (or a pair)."""
        return self.tokenizer.num_special_tokens_to_add(pair)

    def encode_fields(self, task: Task, inputs: Sequence[Any], max_length: int, describe: Sequence[bool] | None = None
                      ) -> list[tuple[TextField, Encoded, list[int] | None]]:
        """What core.encoding.encode_fields makes of this kind: per field of `task`, its texts'
        ids (no special tokens) and, for a list field, how many texts each input has. A pair is
        cut longest-first (the tokenizer's own truncation) so that with the template it holds at
        most `max_length` tokens; a text and a list make one pair per text of the list
        (`listed_first` says in which order), each cut on its own: the first text's ids are the
        longest it keeps in any of its pairs, and each listed text (a `ListedIds`) says how many
        of them its pair keeps."""
        pair = task.form is not TaskForm.TEXT
        budget = max(1, max_length - self.specials(pair))
        describing = describe is not None and any(describe)
        if task.form is TaskForm.CONTEXTS:
            first, listed = task.fields
            counts = [len(getattr(x, listed.name)) for x in inputs]
            texts = [(t, getattr(x, first.name)) if listed_first(task) else (getattr(x, first.name), t)
                     for x in inputs for t in getattr(x, listed.name)]
            owner = [i for i, n in enumerate(counts) for _ in range(n)]  # the input of each pair
        else:
            counts = None
            texts = [tuple(getattr(x, f.name) for f in task.fields) for x in inputs]
            owner = list(range(len(inputs)))
        whole, kept = self._encode(texts if pair else [t[0] for t in texts], budget, describing)
        wanted = [describing and describe[i] for i in owner]
        # the segment of each field in its pairs' encodings
        segments = [1, 0] if task.form is TaskForm.CONTEXTS and listed_first(task) else range(len(task.fields))
        parts = [[_part(self, w, e, k, want) for w, e, want in zip(whole, kept, wanted, strict=True)]
                 for k in segments]
        if counts is None:
            return [(f, _encoded(rows, describing), None) for f, rows in zip(task.fields, parts, strict=True)]
        firsts, listed_parts = [], []
        at = 0
        for n in counts:  # a text's longest kept first text, and by how many tokens its pairs cut it most
            mine = parts[0][at:at + n]
            if not mine:  # no text listed: nothing to pair (the service refuses it as a text without tokens)
                firsts.append(([], 0, 0, [] if describing else None))
                continue
            longest = max(mine, key=lambda part: len(part[0]))
            firsts.append((longest[0], max(part[1] for part in mine), *longest[2:]))
            listed_parts += [(ListedIds(rows, len(q[0])), cut, *rest)
                             for q, (rows, cut, *rest) in zip(mine, parts[1][at:at + n], strict=True)]
            at += n
        return [(task.fields[0], _encoded(firsts, describing), None),
                (task.fields[1], _encoded(listed_parts, describing), counts)]

    def _encode(self, texts: list, budget: int, describing: bool) -> tuple[list, list]:
        """Each text (or pair) encoded whole and as kept: cut longest-first to `budget` tokens
        by the tokenizer's own truncation (the same encoding when it fits)."""
        encode = self.tokenizer.encode_batch if describing else self.tokenizer.encode_batch_fast
        whole = encode(texts, add_special_tokens=False)
        long = [i for i, e in enumerate(whole) if len(e.ids) > budget]
        kept = list(whole)
        if long:
            cutter = self._cutters.get(budget)
            if cutter is None:  # made once per budget: a large vocabulary's copy costs milliseconds
                cutter = Tokenizer.from_str(self.tokenizer.to_str())
                cutter.enable_truncation(budget, strategy="longest_first")
                self._cutters[budget] = cutter
            for i, e in zip(long, cutter.encode_batch([texts[i] for i in long], add_special_tokens=False), strict=True):
                kept[i] = e
        return whole, kept


def listed_first(task: Task) -> bool:
    """The order of a text and each text of its list in their pair. A labelled task reads each
    listed text as the premise of the first (verification: evidence, then the claim, as an NLI
    model reads premise then hypothesis); an unlabelled one (rerank) the first text, then each
    listed one (query, then passage, as cross-encoders are trained)."""
    return task.form is TaskForm.CONTEXTS and task.labelled


class ListedIds(list):
    """The ids of a text of a list field, paired with the input's first text: `first_kept`, how
    many of the first text's ids its pair keeps."""

    __slots__ = ("first_kept",)

    def __init__(self, ids: Sequence[int], first_kept: int) -> None:
        super().__init__(ids)
        self.first_kept = first_kept


def _part(encoder: TemplateEncoder, whole, kept, k: int, describe: bool) -> tuple:
    """Text `k` of one encoding: its kept ids, how many it lost, its unknown ids, and (`describe`)
    its tokens as explanations show them."""
    span = _segment(kept, k)
    row = kept.ids[span]
    cut = len(range(*_segment(whole, k).indices(len(whole.ids)))) - len(row)
    unknown = row.count(encoder.unk_id) if encoder.unk_id is not None else 0
    tokens = None if not describe else [
        {"token": t, "start": s, "end": end, "unknown": encoder.is_unknown(token_id)}
        for t, (s, end), token_id in zip(kept.tokens[span], kept.offsets[span], row)]
    return row, cut, unknown, tokens


def _encoded(parts: list[tuple], describing: bool) -> Encoded:
    return Encoded([p[0] for p in parts], [p[1] for p in parts], [p[3] for p in parts] if describing else None,
                   [p[2] for p in parts])


def _segment(encoding, k: int) -> slice:
    """The tokens of text `k` (0: the first, 1: the second of a pair) in an encoding made
    without special tokens: the first text's tokens come first."""
    if k == 0:
        ids = encoding.sequence_ids if encoding.n_sequences > 1 else None
        return slice(0, len(encoding.ids) if ids is None else ids.count(0))
    return slice(encoding.sequence_ids.count(0), len(encoding.ids))


__all__ = ["GRAPH_INPUTS", "KIND", "LOGITS", "ListedIds", "PairTemplate", "TRANSFORMERS_CONFIG_FILE", "TemplateEncoder",
           "TemplateIds", "UNDECIDED_LABEL", "listed_first"]
