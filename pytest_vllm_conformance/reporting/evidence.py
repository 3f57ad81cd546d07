"""What a check judged, and how many of each: the evidence a pass carries.

A contract test hands the harness its evidence through the ``vllm_evidence``
fixture (``vllm_evidence.judged(128, "requests")``). A pass that judged
nothing is not a pass: the plugin turns it into *undecided*, naming what was
missing ("no latency objective declared"). A test that records nothing is
credited with the answers its clients received during its call, so a plain
request-and-assert check needs no bookkeeping, and a check that neither sent
anything nor recorded anything cannot pass.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Judged:
    count: int
    what: str  # a plural phrase, its noun last: "requests", "latency objectives", "scored positions"
    missing: str  # why nothing was judged, when count is 0


@dataclass
class Evidence:
    entries: list[Judged] = field(default_factory=list)

    def judged(self, count: int, what: str, *, missing: str | None = None) -> None:
        """``count`` things of kind ``what`` were judged; when 0, ``missing`` says why (the undecided reason)."""
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise TypeError(f"judged() takes a count of {what} (an int >= 0), not {count!r}")
        self.entries.append(Judged(count, what, missing or f"no {what} to judge"))

    @property
    def recorded(self) -> bool:
        return bool(self.entries)

    def lacking(self) -> str | None:
        """Why this evidence does not carry a pass (None when it does)."""
        if not self.entries:
            return "the check judged nothing: it received no answer and recorded no evidence"
        empty = [entry.missing for entry in self.entries if entry.count == 0]
        return "; ".join(empty) if empty else None

    def line(self) -> str:
        """``judged: 2 objectives, 128 requests``."""
        return "judged: " + ", ".join(f"{entry.count} {noun(entry.what, entry.count)}" for entry in self.entries)


def noun(plural: str, count: int) -> str:
    """``1 scored position``, ``2 scored positions``: the phrase as given (its noun last), singular for one."""
    if count == 1 and plural.endswith("s") and not plural.endswith("ss"):
        return plural[:-1]
    return plural


def plural(phrase: str, count: int) -> str:
    """The phrase ``noun`` was given, back from what it printed for ``count``."""
    return phrase + "s" if count == 1 and not phrase.endswith("s") else phrase
