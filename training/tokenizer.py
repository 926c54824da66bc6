"""Build the word-level tokenizer (Hugging Face `tokenizers`) and save it as tokenizer.json.

Lower-casing (after NFKC) normaliser, punctuation-aware pre-tokeniser (words and each
punctuation mark separately), min frequency, [PAD]=0 and [UNK]=1. The service loads the same
file through `core.tokenization.TextEncoder`.

Vocabulary over pretrained vectors: besides the training words, the `pretrained_words` (the
most frequent words of a pretrained vector set, e.g. GloVe) are in the vocabulary, so a word
that training never saw still has its pretrained vector at inference. `oov_buckets` hash-bucket
tokens ("[OOV0]".."[OOV{n-1}]", last ids) take every remaining word, via TextEncoder.
Vocabulary order: [PAD], [UNK], training words (most frequent first), buckets, then the pretrained
words not among the training words (in their given order). Everything before the pretrained-only
words is what training can see, so a network may keep a trainable table for just those ids
(`trainable_rows`).
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Iterable, Iterator, Sequence

from tokenizers import Tokenizer, normalizers, pre_tokenizers
from tokenizers.models import WordLevel
from tokenizers.trainers import WordLevelTrainer

from core.tokenization import PAD_TOKEN, UNK_TOKEN, oov_token


# Penn Treebank bracket escapes, as in Wikipedia-derived sets (FEVER): "-LRB-" is "(".
PTB_BRACKETS = {"-LRB-": "(", "-RRB-": ")", "-LSB-": "[", "-RSB-": "]", "-LCB-": "{", "-RCB-": "}"}


def _with_text_rules(tokenizer: Tokenizer) -> Tokenizer:
    tokenizer.normalizer = normalizers.Sequence(
        [normalizers.NFKC(), *(normalizers.Replace(escape, bracket) for escape, bracket in PTB_BRACKETS.items()),
         normalizers.Lowercase()]
    )
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation(behavior="isolated")]
    )
    return tokenizer


def build_tokenizer(
    texts: Iterable[str],
    min_frequency: int = 1,
    max_vocab: int | None = None,
    pretrained_words: Sequence[str] = (),
    max_pretrained: int = 0,
    oov_buckets: int = 0,
) -> Tokenizer:
    """The training words (at least `min_frequency` times, at most `max_vocab` of them), plus the
    first `max_pretrained` of `pretrained_words` that this tokenizer can produce, plus
    `oov_buckets` hash buckets."""
    tokenizer = _with_text_rules(Tokenizer(WordLevel(unk_token=UNK_TOKEN)))
    trainer = WordLevelTrainer(
        vocab_size=(max_vocab or 10_000_000),
        min_frequency=min_frequency,
        special_tokens=[PAD_TOKEN, UNK_TOKEN],
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    if not max_pretrained and not oov_buckets:
        return tokenizer

    trained = sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])
    vocab = {token: index for index, (token, _) in enumerate(trained)}  # [PAD]=0, [UNK]=1, words
    for index in range(oov_buckets):
        vocab[oov_token(index)] = len(vocab)
    for word in itertools.islice(pretrained_only(tokenizer, pretrained_words, set(vocab)), max_pretrained):
        vocab[word] = len(vocab)
    # [PAD] and [UNK] are plain vocabulary entries here, not added tokens: a literal "[PAD]" in a
    # text is three tokens, never the padding id.
    return _with_text_rules(Tokenizer(WordLevel(vocab=vocab, unk_token=UNK_TOKEN)))


def pretrained_only(tokenizer: Tokenizer, pretrained_words: Iterable[str], known: set[str]) -> Iterator[str]:
    """The pretrained words a vocabulary appends after `known` (training words, specials,
    buckets), in their given order: each once, and only those this tokenizer can produce.
    `attserve bundle extend-vocab` (export.rewrite.extend_vocab) relies on this being the one rule."""
    seen = set(known)
    for word in pretrained_words:
        if word not in seen:
            seen.add(word)
            if producible(tokenizer, word):
                yield word


def trainable_rows(tokenizer: Tokenizer) -> int:
    """Ids below this are training words, specials and buckets: the rows training can update."""
    from core.tokenization import TextEncoder

    encoder = TextEncoder(tokenizer)
    if not encoder.oov_buckets:
        raise ValueError("trainable_rows needs a tokenizer with [OOV] buckets (they end the trainable range)")
    return encoder.oov_base + encoder.oov_buckets


def pretrained_count(tokenizer: Tokenizer) -> int:
    """How many pretrained-only words the vocabulary appends (0 without buckets)."""
    from core.tokenization import TextEncoder

    return tokenizer.get_vocab_size() - trainable_rows(tokenizer) if TextEncoder(tokenizer).oov_buckets else 0


def cut_pretrained(tokenizer: Tokenizer, max_pretrained: int) -> Tokenizer:
    """The same tokenizer with only its first `max_pretrained` pretrained-only words (a prefix of
    the vocabulary: every kept word keeps its id; the rest now hash into the [OOV] buckets).
    A network whose pretrained-only rows stayed frozen in training is then exactly the network
    that would have been trained with the smaller vocabulary."""
    keep = trainable_rows(tokenizer) + max_pretrained
    vocab = {token: index for token, index in tokenizer.get_vocab().items() if index < keep}
    return _with_text_rules(Tokenizer(WordLevel(vocab=vocab, unk_token=UNK_TOKEN)))


def producible(tokenizer: Tokenizer, word: str) -> bool:
    """Whether the normaliser and pre-tokeniser can turn some text into exactly this token
    (GloVe's "u.s." or "'s" cannot: punctuation is split off)."""
    if tokenizer.normalizer.normalize_str(word) != word:
        return False
    pieces = tokenizer.pre_tokenizer.pre_tokenize_str(word)
    return len(pieces) == 1 and pieces[0][0] == word


def save_tokenizer(tokenizer: Tokenizer, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(path))
    return path
