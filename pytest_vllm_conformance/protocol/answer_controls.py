"""What a generation answer shows about its control: that it held, that it broke, or neither.

An answer cut by ``max_tokens`` whose every character so far is consistent
with its constraint is undecided (a skip, so the feature is partial), never
a failure. The answer itself is read by ``answer_reader.py``; structured outputs and
tool calls judge it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Judgement:
    """What an answer shows about its control: nothing wrong (both None), ``problem``, or ``undecided`` (why not)."""

    problem: str | None = None
    undecided: str | None = None


HELD = Judgement()
