"""tests/mutation_check.py stays in step with the code: each mutation's snippet occurs exactly
once in its file (a renamed line would otherwise make the check apply nothing), each changes the
line, and the tests it runs exist."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.mutation_check import MUTATIONS

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("mutation", MUTATIONS, ids=[m.name for m in MUTATIONS])
def test_every_mutation_applies_to_the_current_code(mutation):
    text = (ROOT / mutation.path).read_text(encoding="utf-8")
    assert text.count(mutation.old) == 1, f"{mutation.path}: snippet found {text.count(mutation.old)} times"
    assert mutation.new != mutation.old
    for test in mutation.tests:
        file, _, name = test.partition("::")
        source = (ROOT / file).read_text(encoding="utf-8")
        assert not name or f"def {name}(" in source, test


def test_the_issue_21_mutations_are_all_there():
    names = {m.name for m in MUTATIONS}
    for required in ("shared masked max ignores its mask", "ACT global max without its mask",
                     "ACT global max with row 0's mask for every row", "inference returns a batch's rows in reverse order",
                     "every item gets row 0's evidence scores", "all checksum checks skipped",
                     "only the tokenizer's checksum skipped", "batch formation ignores the token budget"):
        assert required in names
