"""Text -> padded int64 id arrays, from a bundle's `tokenizer.json` (Hugging Face `tokenizers`).

This is the only encoder in the project: training, the export parity check and the service all
call it, so the ids a network was trained on are produced by the code that serves it.
numpy + tokenizers only (the serving image has no torch).
"""

from __future__ import annotations

import re
import unicodedata
import zlib
from dataclasses import dataclass
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
# One short text goes through `encode`: `encode_batch` dispatches to rayon's pool, ~30% dearer
# for one text. Longer texts take `encode_batch` even alone, because it releases the GIL and
# `encode` does not: a 1 MB text tokenized in a worker thread would otherwise stall the event loop.
SHORT_TEXT_CHARS = 2048


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
        if len(texts) == 1 and len(texts[0]) <= SHORT_TEXT_CHARS:
            encodings = [self.tokenizer.encode(texts[0], add_special_tokens=False)]
        elif describing:
            encodings = self.tokenizer.encode_batch(list(texts), add_special_tokens=False)
        else:
            # Without character offsets: 25% less time a text (the pre-tokenizer dominates). Only
            # a text with an unknown word needs its offsets (to hash the word): encoded again.
            encodings = self.tokenizer.encode_batch_fast(list(texts), add_special_tokens=False)
            if self.oov_buckets:
                again = [i for i, e in enumerate(encodings) if self.unk_id in e.ids]
                if again:
                    redone = self.tokenizer.encode_batch([texts[i] for i in again], add_special_tokens=False)
                    for i, e in zip(again, redone, strict=True):
                        encodings[i] = e
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
    length = max([len(r) for r in rows] + [min_length])
    out = np.zeros((len(rows), length), dtype=np.int64)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out


def pad_3d(groups: Sequence[Sequence[Sequence[int]]], min_length: int = 1) -> np.ndarray:
    """(B, K, L) int64 for lists of id lists (evidence sets); missing slots are all PAD_ID."""
    count = max([len(g) for g in groups] + [1])
    length = max([len(r) for g in groups for r in g] + [min_length])
    out = np.zeros((len(groups), count, length), dtype=np.int64)
    for i, g in enumerate(groups):
        for k, r in enumerate(g):
            out[i, k, : len(r)] = r
    return out
