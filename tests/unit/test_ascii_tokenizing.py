"""The encoder's ASCII rules (core.tokenization.AsciiRules) give exactly the ids, cuts and
unknown counts the tokenizers library gives: for the shipped bundles' tokenizers and for ones
built by training (with and without the PTB replacements, hash buckets, added tokens), on
random ASCII text made of the characters where the two could differ."""

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import AddedToken, Tokenizer, normalizers

from core.tokenization import AsciiRules, TextEncoder
from training.tokenizer import build_tokenizer

SHIPPED = Path(__file__).resolve().parents[2] / "model_repository"

CORPUS = ["A man plays a guitar.", "Two dogs run, in the park!", "The man isn't sleeping.",
          "(Paris) is -LRB- was -RRB- big", "a_b c-d e'f 3.5 $10 #tag @you"]
# every ASCII character the rules treat apart, and strings the library treats as units
PIECES = st.one_of(
    st.sampled_from([" ", "\t", "\n", "\x0b", "\x0c", "\r", "\x1c", "\x1f", "\x00", "\x7f", "_", "-", "'", "[", "]",
                     "-LRB-", "-RRB-", "-LSB-", "-lrb-", "[PAD]", "[UNK]", "[OOV0]", "[OOV3]", "man", "MAN", "Dogs",
                     "guitar", "paris", "zebra", "qwxz"]),
    st.characters(min_codepoint=0, max_codepoint=127),
    st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=6),
)
TEXTS = st.lists(st.lists(PIECES, max_size=12).map("".join), min_size=1, max_size=6)


def _pair(tokenizer: Tokenizer) -> tuple[TextEncoder, TextEncoder]:
    """(with the rules, the library alone) over the same tokenizer."""
    fast = TextEncoder(Tokenizer.from_str(tokenizer.to_str()))
    plain = TextEncoder(Tokenizer.from_str(tokenizer.to_str()))
    plain.ascii_rules = None
    return fast, plain


def _built(kind: str) -> Tokenizer:
    if kind == "buckets":
        return build_tokenizer(CORPUS, oov_buckets=4, pretrained_words=["zebra", "paris", "("], max_pretrained=3)
    tokenizer = build_tokenizer(CORPUS)
    if kind == "no-replacements":
        tokenizer.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase()])
    if kind == "added-tokens":
        tokenizer.add_special_tokens([AddedToken("[PAD]", special=True, normalized=False),
                                      AddedToken("[UNK]", special=True, normalized=False)])
    return tokenizer


ENCODERS = {kind: _pair(_built(kind)) for kind in ("plain", "no-replacements", "added-tokens", "buckets")}
ENCODERS |= {name: _pair(Tokenizer.from_file(str(SHIPPED / name / "tokenizer.json")))
             for name in ("snli-attconv-light", "fever-attconv")}


@pytest.mark.parametrize("kind", sorted(ENCODERS))
@settings(max_examples=300, deadline=None)
@given(texts=TEXTS, max_length=st.integers(1, 12))
def test_the_ascii_rules_encode_as_the_library_does(kind, texts, max_length):
    fast, plain = ENCODERS[kind]
    assert fast.ascii_rules is not None
    got, want = fast.encode(texts, max_length), plain.encode(texts, max_length)
    assert (got.ids, got.cut, got.unknown) == (want.ids, want.cut, want.unknown)


def test_rules_are_taken_only_from_the_pipeline_they_reproduce():
    tokenizer = build_tokenizer(CORPUS)
    assert AsciiRules.of(tokenizer) is not None
    tokenizer.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Strip(), normalizers.Lowercase()])
    assert AsciiRules.of(tokenizer) is None
    tokenizer.normalizer = normalizers.Sequence([normalizers.NFD(), normalizers.Lowercase()])
    assert AsciiRules.of(tokenizer) is None
