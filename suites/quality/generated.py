"""Generated items that grow the shipped sets to a size whose gate can see a drop.

Forty hand-written items cannot show a drop smaller than about 0.125 even in
the best case (paired.py: the minimum detectable drop), so each shipped set
is its hand-written items followed by generated ones up to the size asked
for (``quality.eval_items``). The generated items are the kinds a model that
reads its prompt gets right and a broken kernel gets wrong: arithmetic,
copying a word, looking a value up in a short list, ordering.

Each set comes from one seeded generator drawn in order, so the items of a
smaller size are the first items of a larger one, with the same doc ids and
prompts: a baseline saved at one size compares item by item, on the items
both have, with a run at another.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from itertools import islice
from pathlib import Path
from typing import Any

SEED = 20261201
WORDS = (
    "apple", "harbour", "lantern", "meadow", "pencil", "river", "saddle", "thunder", "velvet", "window",
    "anchor", "biscuit", "candle", "dragon", "engine", "falcon", "garden", "hammer", "island", "jacket",
    "kettle", "ladder", "marble", "needle", "orange", "pepper", "rabbit", "silver", "tunnel", "violin",
)  # fmt: skip
NAMES = ("kiwi", "plum", "fig", "pear", "lime", "date", "peach", "mango", "grape", "melon")

Item = dict[str, Any]


def _sum(rng: random.Random) -> tuple[str, int]:
    a, b = rng.randrange(10, 100), rng.randrange(10, 100)
    return f"What is {a} + {b}?", a + b


def _difference(rng: random.Random) -> tuple[str, int]:
    a, b = rng.randrange(20, 100), rng.randrange(1, 20)
    return f"What is {a} minus {b}?", a - b


def _product(rng: random.Random) -> tuple[str, int]:
    a, b = rng.randrange(2, 13), rng.randrange(2, 13)
    return f"What is {a} times {b}?", a * b


def _successor(rng: random.Random) -> tuple[str, int]:
    a = rng.randrange(10, 1000)
    return f"What number comes after {a}?", a + 1


NUMERIC = (_sum, _difference, _product, _successor)


def _pairs(rng: random.Random) -> list[tuple[str, int]]:
    return [(name, rng.randrange(1, 10)) for name in rng.sample(NAMES, 4)]


def _short_answer(rng: random.Random) -> Item:
    kind = rng.randrange(6)
    if kind < len(NUMERIC):
        question, answer = NUMERIC[kind](rng)
        return {"question": question, "answer": str(answer)}
    if kind == 4:
        word = f"{rng.choice(WORDS)}{rng.randrange(10, 100)}"
        return {"question": f"Repeat this word exactly: {word}", "answer": word}
    pairs = _pairs(rng)
    name, value = rng.choice(pairs)
    listing = ", ".join(f"{key}={number}" for key, number in pairs)
    return {"question": f"Given {listing}, what is the value of {name}?", "answer": str(value)}


def _choices(rng: random.Random, right: object, wrong: list) -> Item:
    choices = [str(choice) for choice in (right, *wrong)]
    rng.shuffle(choices)
    return {"choices": choices, "answer": choices.index(str(right))}


def _multiple_choice(rng: random.Random) -> Item:
    kind = rng.randrange(4)
    if kind == 0:
        numbers = sorted(rng.sample(range(1, 1000), 4))
        return {"question": "Which number is the largest?", **_choices(rng, str(numbers[-1]), numbers[:-1])}
    if kind == 1:
        question, answer = rng.choice(NUMERIC)(rng)
        wrong = rng.sample([answer + offset for offset in (-10, -2, -1, 1, 2, 10) if answer + offset >= 0], 3)
        return {"question": question, **_choices(rng, answer, wrong)}
    if kind == 2:
        pairs = _pairs(rng)
        name, value = rng.choice(pairs)
        listing = ", ".join(f"{key}={number}" for key, number in pairs)
        others = [key for key, number in pairs if number != value]
        distractors = (others + [n for n in NAMES if n not in dict(pairs)])[:3]
        return {"question": f"Given {listing}, which one has the value {value}?", **_choices(rng, name, distractors)}
    words = sorted(rng.sample(WORDS, 4))
    return {"question": "Which word comes first in alphabetical order?", **_choices(rng, words[0], words[1:])}


GENERATORS: dict[str, Callable[[random.Random], Item]] = {
    "short_answer": _short_answer,
    "multiple_choice": _multiple_choice,
}


def _stream(template: str, written: list[Item]) -> Iterator[Item]:
    """The hand-written items, then generated ones not seen before (no item counted twice)."""
    seen = {json.dumps(item, sort_keys=True) for item in written}
    yield from written
    rng = random.Random(f"{SEED}-{template}")
    generate = GENERATORS[template]
    while True:
        item = generate(rng)
        key = json.dumps(item, sort_keys=True)
        if key not in seen:
            seen.add(key)
            yield item


MAX_ITEMS = 5000  # well inside what the generators can make without repeating an item


def items(template: str, size: int, written: list[Item]) -> list[Item]:
    """The first ``size`` items of a shipped set: ``written`` first, then generated ones."""
    if not 1 <= size <= MAX_ITEMS:
        raise ValueError(f"a shipped eval set has 1 to {MAX_ITEMS} items, not {size}")
    return list(islice(_stream(template, written), size))


def write(template: str, size: int, source: Path, destination: Path) -> Path:
    """The set of ``size`` items as JSONL at ``destination``, from the hand-written ``source``."""
    written = [json.loads(line) for line in source.read_text().splitlines() if line.strip()]
    destination.write_text("".join(json.dumps(item) + "\n" for item in items(template, size, written)))
    return destination
