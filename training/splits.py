"""Split helpers, pure functions (tested on small synthetic data): groups that must stay on one
side of a split, and per-label cuts. Seeded with random.Random and a str seed, which is stable
across Python versions, so the published splits do not move."""

from __future__ import annotations

import random
from typing import Callable, Hashable, Sequence, TypeVar

T = TypeVar("T")


def group_split(keys: Sequence[Sequence[Hashable]], dev_fraction: float, seed: int) -> tuple[list[int], list[int]]:
    """Item indices split into (train, dev) so that items sharing ANY key land on the same side:
    union-find over keys, then a seeded `dev_fraction` of the groups goes to dev."""
    parent: dict[Hashable, Hashable] = {}

    def find(x: Hashable) -> Hashable:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for item_keys in keys:
        if not item_keys:
            raise ValueError("every item needs at least one group key")
        first = find(item_keys[0])
        for key in item_keys[1:]:
            root = find(key)
            if root != first:
                parent[root] = first
    # a group is named by its smallest key's repr, so the order does not depend on insertion order
    members: dict[Hashable, list[int]] = {}
    for i, item_keys in enumerate(keys):
        members.setdefault(find(item_keys[0]), []).append(i)
    groups = sorted(members.values(), key=lambda idx: min(repr(k) for i in idx for k in keys[i]))
    random.Random(f"group-split:{seed}").shuffle(groups)
    n_dev = round(dev_fraction * len(groups))
    dev = sorted(i for group in groups[:n_dev] for i in group)
    train = sorted(i for group in groups[n_dev:] for i in group)
    return train, dev


def stratified_split(examples: Sequence[T], label_of: Callable[[T], str], fractions: tuple[float, float, float], seed: int) -> tuple[list[T], list[T], list[T]]:
    """(train, dev, test) with each label's examples cut by `fractions`, seeded per label.
    Hand-written rather than sklearn's so the published splits cannot move with a library
    upgrade (random.Random with a str seed is stable across Python versions)."""
    by_label: dict[str, list[T]] = {}
    for example in examples:
        by_label.setdefault(label_of(example), []).append(example)
    train: list[T] = []
    dev: list[T] = []
    test: list[T] = []
    for label in sorted(by_label):
        items = list(by_label[label])
        random.Random(f"stratified:{seed}:{label}").shuffle(items)
        n_test = round(fractions[2] * len(items))
        n_dev = round(fractions[1] * len(items))
        test += items[:n_test]
        dev += items[n_test : n_test + n_dev]
        train += items[n_test + n_dev :]
    for name, part in (("train", train), ("dev", dev), ("test", test)):
        random.Random(f"stratified:{seed}:order:{name}").shuffle(part)  # no label blocks
    return train, dev, test


