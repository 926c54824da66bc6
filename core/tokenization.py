"""Text -> padded int64 id arrays, from a bundle's `tokenizer.json` (Hugging Face `tokenizers`).

This is the only encoder in the project: training, the export parity check and the service all
call it, so the ids a network was trained on are produced by the code that serves it.
numpy + tokenizers only (the serving image has no torch).
"""

from __future__ import annotations

import json
import re
import unicodedata
import zlib
from dataclasses import dataclass
from itertools import chain, repeat
from pathlib import Path
from typing import Sequence

import numpy as np
from tokenizers import Tokenizer

PAD_TOKEN = "[PAD]"
UNK_TOKEN = "[UNK]"
PAD_ID = 0
# Hash buckets for words outside the vocabulary: "[OOV0]".."[OOV{n-1}]", contiguous ids in the
# vocabulary of tokenizer.json. A word the WordLevel model maps to [UNK] is re-mapped to bucket
# crc32(NFKC-lower(word)) % n, so an unknown word matches itself and not every other unknown
# word. A tokenizer without bucket tokens keeps plain [UNK].
OOV_PREFIX = "[OOV"


def oov_token(index: int) -> str:
    return f"{OOV_PREFIX}{index}]"


def oov_bucket(word: str, buckets: int) -> int:
    """The bucket of an unknown word: stable across processes and machines (crc32, not hash())."""
    return zlib.crc32(unicodedata.normalize("NFKC", word).lower().encode("utf-8")) % buckets


# One short text goes through `encode`: `encode_batch` dispatches to rayon's pool, dearer
# for one text. Longer texts take `encode_batch` even alone, because it releases the GIL and
# `encode` does not: a 1 MB text tokenized in a worker thread would otherwise stall the event loop.
SHORT_TEXT_CHARS = 2048


# --- ASCII texts without the tokenizers library ---------------------------------------------
# The text rules every bundle's tokenizer.json has (training.tokenizer): NFKC, literal string
# replacements (the PTB bracket escapes), lower-casing; split at whitespace, each punctuation
# character a token of its own; a word-level vocabulary. On an ASCII text NFKC changes nothing,
# and the rest is what `str.replace`, `str.lower` and one regular expression do, exactly, at a
# fraction of what a call into the library costs a short text (docs/performance.md). A text
# outside these terms (non-ASCII, longer than SHORT_TEXT_CHARS, an added token's first
# character, a word outside the vocabulary where a replacement applies) goes to the library.
# Rust's char::is_whitespace on ASCII (not \x1c-\x1f, which str.isspace and re's \s include).
_ASCII_WHITESPACE = " \t\n\x0b\x0c\r"
# The Punctuation pre-tokenizer on ASCII: is_ascii_punctuation, the 32 characters !../:..@[..`{..~
_ASCII_PUNCTUATION = r"!-/:-@\[-`{-~"
_ASCII_WORDS = re.compile(rf"[{_ASCII_PUNCTUATION}]|[^{_ASCII_WHITESPACE}{_ASCII_PUNCTUATION}]+")


@dataclass(frozen=True)
class AsciiRules:
    """A tokenizer's text rules when they are the ones above (`of`: None otherwise): its
    replacements in order, its word-level vocabulary, and the first characters of its added
    tokens (a text holding one may hold the token, which the library matches before the rules)."""

    replacements: tuple[tuple[str, str], ...]
    vocab: dict[str, int]
    added_first_chars: frozenset[str]

    @classmethod
    def of(cls, tokenizer: Tokenizer) -> "AsciiRules | None":
        spec = json.loads(tokenizer.to_str())
        normalizer, pre, model = spec.get("normalizer") or {}, spec.get("pre_tokenizer") or {}, spec.get("model") or {}
        steps = normalizer.get("normalizers") if normalizer.get("type") == "Sequence" else None
        if (not steps or steps[0] != {"type": "NFKC"} or steps[-1] != {"type": "Lowercase"}
                or pre != {"type": "Sequence", "pretokenizers": [{"type": "WhitespaceSplit"},
                                                                 {"type": "Punctuation", "behavior": "Isolated"}]}
                or model.get("type") != "WordLevel"):
            return None
        replacements = []
        for step in steps[1:-1]:
            pattern = step.get("pattern") or {}
            if step.get("type") != "Replace" or set(pattern) != {"String"} or not pattern["String"]:
                return None
            replacements.append((pattern["String"], step["content"]))
        if not all(old.isascii() and new.isascii() for old, new in replacements):
            return None
        firsts = {t["content"][0] for t in spec.get("added_tokens") or () if t.get("content")}
        firsts |= {c.upper() for c in firsts} | {c.lower() for c in firsts}
        return cls(tuple(replacements), dict(model["vocab"]), frozenset(firsts))

    def takes(self, text: str) -> bool:
        # a long text goes to the library, whose batch call releases the GIL (as `encode` says)
        return (len(text) <= SHORT_TEXT_CHARS and text.isascii()
                and not any(c in text for c in self.added_first_chars))

    def ids(self, text: str, unk_id: int) -> list[int]:
        """The ids the library gives `text` (one `takes`), unknown words as `unk_id`."""
        for old, new in self.replacements:
            if old in text:
                text = text.replace(old, new)
        return list(map(self.vocab.get, _ASCII_WORDS.findall(text.lower()), repeat(unk_id)))

    def hashed_ids(self, text: str, unk_id: int, oov_base: int, buckets: int) -> list[int] | None:
        """`ids` with each unknown word in its hash bucket (oov_bucket of its text as sent), or
        None when a replacement applies to `text` (a replaced word's span is not its own: the
        library's offsets are needed)."""
        if any(old in text for old, _ in self.replacements):
            return None
        get = self.vocab.get
        return [oov_base + oov_bucket(text[m.start():m.end()], buckets) if (i := get(m.group())) is None else i
                for m in _ASCII_WORDS.finditer(text.lower())]


@dataclass(frozen=True)
class Encoded:
    """A list of token-id lists, each cut to the max length; `cut[i]`, how many tokens text i
    lost to it; `tokens[i]`, when text i was asked to be described, the tokens the model sees
    (`TextEncoder.encode(..., describe=...)`: the kept ones only); `unknown[i]`, how many of
    text i's kept tokens are outside the vocabulary (`TextEncoder.is_unknown`)."""

    ids: list[list[int]]
    cut: list[int]
    tokens: list[list[dict] | None] | None = None
    unknown: list[int] | None = None

    @property
    def truncated(self) -> list[bool]:
        return [c > 0 for c in self.cut]

    @property
    def lengths(self) -> list[int]:
        return [len(x) for x in self.ids]


class TextEncoder:
    def __init__(self, tokenizer: Tokenizer) -> None:
        pad = tokenizer.token_to_id(PAD_TOKEN)
        if pad != PAD_ID:
            raise ValueError(f"tokenizer must map {PAD_TOKEN} to id {PAD_ID}, it maps it to {pad}")
        if tokenizer.token_to_id(UNK_TOKEN) is None:
            raise ValueError(f"tokenizer has no {UNK_TOKEN} token")
        # Padding and truncation are ours (numpy, per input); the file must not do them too.
        tokenizer.no_padding()
        tokenizer.no_truncation()
        self.tokenizer = tokenizer
        self.unk_id = tokenizer.token_to_id(UNK_TOKEN)
        self.oov_base, self.oov_buckets = _oov_range(tokenizer)
        self._unknown = frozenset(self.unknown_ids())
        self.ascii_rules = AsciiRules.of(tokenizer)

    def unknown_ids(self) -> list[int]:
        """Ids a word outside the vocabulary can get: [UNK] and the hash buckets."""
        return [self.unk_id, *range(self.oov_base, self.oov_base + self.oov_buckets)]

    def is_unknown(self, token_id: int) -> bool:
        """Whether a (hashed) id is one of `unknown_ids()`: what explanations mark `unknown`."""
        return token_id in self._unknown

    def count_unknown(self, ids: Sequence[int]) -> int:
        """How many of `ids` (hashed) are `is_unknown`: what answers report as
        `unknown_token_share` (the set's own membership test, mapped in C)."""
        return sum(map(self._unknown.__contains__, ids))

    @classmethod
    def from_file(cls, path: str | Path) -> "TextEncoder":
        return cls(Tokenizer.from_file(str(path)))

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size(with_added_tokens=True)

    def encode(self, texts: Sequence[str], max_length: int, describe: Sequence[bool] | None = None) -> Encoded:
        """Token ids of each text, truncated to `max_length`; with `describe`, also the tokens
        of the texts it flags, from the same tokenization (`describe_tokens`)."""
        if not texts:
            return Encoded([], [], None, [])
        describing = describe is not None and any(describe)
        if not describing and self.ascii_rules is not None:
            return self._encode_ascii_first(texts, max_length)
        if len(texts) == 1 and len(texts[0]) <= SHORT_TEXT_CHARS:
            encodings = [self.tokenizer.encode(texts[0], add_special_tokens=False)]
        elif describing:
            encodings = self.tokenizer.encode_batch(list(texts), add_special_tokens=False)
        else:
            encodings = self._encode_without_offsets(texts)
        ids = [self._hash_unknown(text, e) for text, e in zip(texts, encodings)]
        cut = [max(0, len(x) - max_length) for x in ids]
        tokens = None
        if describing:
            tokens = [self.describe_tokens(text, e, row, max_length) if wanted else None
                      for text, e, row, wanted in zip(texts, encodings, ids, describe, strict=True)]
        kept = [x[:max_length] for x in ids]
        # a word outside the vocabulary is [UNK] before hashing: a text without one (a scan in C)
        # costs nothing more; the others count their kept ids
        unknown = [self.count_unknown(row) if self.unk_id in e.ids else 0
                   for e, row in zip(encodings, kept, strict=True)]
        return Encoded(kept, cut, tokens, unknown)

    def _encode_without_offsets(self, texts: Sequence[str]) -> list:
        """The library's encodings of `texts`, without character offsets (less time a text, where
        the pre-tokenizer dominates) except for a text with an unknown word, encoded again with
        them when its word is hashed."""
        encodings = self.tokenizer.encode_batch_fast(list(texts), add_special_tokens=False)
        if self.oov_buckets:
            again = [i for i, e in enumerate(encodings) if self.unk_id in e.ids]
            if again:
                redone = self.tokenizer.encode_batch([texts[i] for i in again], add_special_tokens=False)
                for i, e in zip(again, redone, strict=True):
                    encodings[i] = e
        return encodings

    def _encode_ascii_first(self, texts: Sequence[str], max_length: int) -> Encoded:
        """`encode` without `describe`: each text the ASCII rules take is encoded by them (an
        unknown word hashed where they can), the others by the library in one batch."""
        rules, unk = self.ascii_rules, self.unk_id
        ids: list[list[int] | None] = [rules.ids(t, unk) if rules.takes(t) else None for t in texts]
        # a word outside the vocabulary is [UNK] before hashing (a scan in C); only those texts
        # count their kept ids, as `encode` does
        had_unknown = [row is not None and unk in row for row in ids]
        if self.oov_buckets:
            for i, flag in enumerate(had_unknown):
                if flag:
                    ids[i] = rules.hashed_ids(texts[i], unk, self.oov_base, self.oov_buckets)
        rest = [i for i, row in enumerate(ids) if row is None]
        if rest:
            for i, e in zip(rest, self._encode_without_offsets([texts[i] for i in rest]), strict=True):
                ids[i] = self._hash_unknown(texts[i], e)
                had_unknown[i] = unk in e.ids
        cut = [max(0, len(x) - max_length) for x in ids]
        kept = [x[:max_length] if len(x) > max_length else x for x in ids]
        unknown = [self.count_unknown(row) if flag else 0 for row, flag in zip(kept, had_unknown, strict=True)]
        return Encoded(kept, cut, None, unknown)

    def _hash_unknown(self, text: str, encoding) -> list[int]:
        ids = encoding.ids
        if not self.oov_buckets or self.unk_id not in ids:
            return ids
        offsets = encoding.offsets  # character spans into `text`
        return [
            self.oov_base + oov_bucket(text[offsets[j][0] : offsets[j][1]], self.oov_buckets) if t == self.unk_id else t
            for j, t in enumerate(ids)
        ]

    def tokens(self, text: str) -> list[str]:
        return self.tokenizer.encode(text, add_special_tokens=False).tokens

    def describe_tokens(self, text: str, encoding, ids: list[int], max_length: int) -> list[dict]:
        """The first `max_length` tokens of `text` (its `encoding` and hashed `ids`), the ones
        the model sees, for explanations: its vocabulary form (an unknown word: its normalized
        text), the character span [start, end) in `text` and whether it is outside the
        vocabulary. The tokens past the max length are not described (a 100,000-character
        text would describe 100,000 tokens); the caller counts them (`Encoded.cut`)."""
        normalizer = self.tokenizer.normalizer
        out = []
        for token, (start, end), token_id in zip(encoding.tokens[:max_length], encoding.offsets[:max_length],
                                                 ids[:max_length]):
            is_unknown = self.is_unknown(token_id)
            if is_unknown:
                span = text[start:end]
                token = normalizer.normalize_str(span) if normalizer is not None else span
            out.append({"token": token, "start": start, "end": end, "unknown": is_unknown})
        return out


# --- a check before tokenizing ---------------------------------------------------------------
# Not part of the encoding: the service calls it to refuse texts before they cost anything.

# Characters that show nothing: controls (NUL...), format (zero-width space/joiners, BOM,
# bidi marks), surrogates, separators, and combining marks, which have no base alone.
INVISIBLE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zs", "Zl", "Zp", "Mn", "Me"})
# Normalize this many characters at a time: at most 18x that (U+FDFA) is ever held at once.
CHECK_CHUNK_CHARS = 4096
_VISIBLE_ASCII = re.compile(r"[!-~]")


class TextTooLong(ValueError):
    def __init__(self, limit: int) -> None:
        super().__init__(f"text over {limit} characters after NFKC")
        self.limit = limit


@dataclass(frozen=True)
class TextCheck:
    normalized_length: int
    visible: bool


def check_text(text: str, max_normalized_chars: int) -> TextCheck:
    """The NFKC length of `text` and whether any character of it is visible, computed in
    chunks of CHECK_CHUNK_CHARS so the work stops (TextTooLong) right after the limit, however
    much a character expands. The length is exact up to combining sequences cut at a chunk
    edge (a character or two per chunk): a limit check, not the tokenizer's normalization."""
    if text.isascii():  # NFKC leaves ASCII as is
        if len(text) > max_normalized_chars:
            raise TextTooLong(max_normalized_chars)
        return TextCheck(len(text), _VISIBLE_ASCII.search(text) is not None)
    length, visible = 0, False
    for start in range(0, len(text), CHECK_CHUNK_CHARS):
        chunk = unicodedata.normalize("NFKC", text[start : start + CHECK_CHUNK_CHARS])
        length += len(chunk)
        if length > max_normalized_chars:
            raise TextTooLong(max_normalized_chars)
        if not visible:
            visible = any(unicodedata.category(c) not in INVISIBLE_CATEGORIES for c in chunk)
    return TextCheck(length, visible)


def ascii_texts_pass(texts: Sequence[str], max_text_chars: int, max_total_chars: int) -> bool:
    """Whether `check_text` would pass every text of `texts` within a shared budget, decided for
    ASCII texts without a call a text: each ASCII (its own NFKC), at most `max_text_chars` long
    and with a visible character, all together at most `max_total_chars`. False says only that
    each text must be checked (and its error worded) one by one."""
    return (all(map(str.isascii, texts)) and max(map(len, texts), default=0) <= max_text_chars
            and sum(map(len, texts)) <= max_total_chars and all(map(_VISIBLE_ASCII.search, texts)))


def _oov_range(tokenizer: Tokenizer) -> tuple[int, int]:
    """(first id, count) of the "[OOV<i>]" bucket tokens; (0, 0) when there are none."""
    first = tokenizer.token_to_id(oov_token(0))
    if first is None:
        return 0, 0
    count = 0
    while tokenizer.token_to_id(oov_token(count)) == first + count:
        count += 1
    if tokenizer.token_to_id(oov_token(count)) is not None:
        raise ValueError(f"tokenizer OOV bucket tokens are not contiguous after {oov_token(count - 1)}")
    return first, count


def pad_2d(rows: Sequence[Sequence[int]], min_length: int = 1) -> np.ndarray:
    """(B, L) int64, right-padded with PAD_ID; L >= min_length so no axis is ever empty."""
    lengths = np.fromiter(map(len, rows), dtype=np.intp, count=len(rows))
    out = np.zeros((len(rows), max(int(lengths.max(initial=0)), min_length)), dtype=np.int64)
    fill_2d(out, rows, lengths)
    return out


def pad_3d(groups: Sequence[Sequence[Sequence[int]]], min_length: int = 1) -> np.ndarray:
    """(B, K, L) int64 for lists of id lists (evidence sets); missing slots are all PAD_ID."""
    count = max([len(g) for g in groups] + [1])
    length = max([len(r) for g in groups for r in g] + [min_length])
    out = np.zeros((len(groups), count, length), dtype=np.int64)
    fill_3d(out, groups)
    return out


# From this many rows on, one scatter of all the ids costs less than a copy a row; below, the
# scatter's fixed cost is the larger (docs/performance.md, 32-pair requests against the raw session).
SCATTER_ROWS = 32


def fill_2d(out: np.ndarray, rows: Sequence[Sequence[int]], lengths: np.ndarray | None = None) -> None:
    """Write id lists into the first len(rows) rows of `out` ((R, L), PAD_ID everywhere, each row
    at least as long as its list), left-aligned: a copy a row for a few rows, else one scatter of
    all the ids (a boolean mask's True places run row by row, as the ids of the rows one after
    another)."""
    if len(rows) < SCATTER_ROWS:
        for i, row in enumerate(rows):
            out[i, : len(row)] = row
        return
    if lengths is None:
        lengths = np.fromiter(map(len, rows), dtype=np.intp, count=len(rows))
    ids = np.fromiter(chain.from_iterable(rows), dtype=np.int64, count=int(lengths.sum()))
    out[: len(rows)][np.arange(out.shape[-1]) < lengths[:, None]] = ids


def fill_3d(out: np.ndarray, groups: Sequence[Sequence[Sequence[int]]]) -> None:
    """`fill_2d` for lists of id lists: group i's text k into out[i, k] ((R, K, L), PAD_ID
    everywhere, K at least the most texts of a group)."""
    counts = np.fromiter(map(len, groups), dtype=np.intp, count=len(groups))
    texts = list(chain.from_iterable(groups))
    lengths = np.zeros((len(groups), out.shape[1]), dtype=np.intp)
    lengths[np.arange(out.shape[1]) < counts[:, None]] = np.fromiter(map(len, texts), dtype=np.intp, count=len(texts))
    ids = np.fromiter(chain.from_iterable(texts), dtype=np.int64, count=int(lengths.sum()))
    out[: len(groups)][np.arange(out.shape[-1]) < lengths[..., None]] = ids
