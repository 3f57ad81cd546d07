"""The long fuzz of every reader of a user's file and every option parser (issue 41).

The same properties as tests/unit/test_reader_fuzz.py (fixtures/reader_fuzz.py),
with many more inputs and no derandomizing: each reader (profile, fleet file, the
serving and quality baselines, a shard's report) gets --examples inputs made from a
valid file (cut short, spliced, re-encoded, an alias bomb, deep nesting, random
bytes), and the option parsers as many values. Prints how many inputs each got,
how many were read and refused, and every finding: an exception other than the
reader's own refusal (what pytest shows as INTERNALERROR) or an input past the
memory bound. Exits 1 on any finding.

    python -m bench.fuzz_readers [--examples N] [--seed S]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from fixtures import reader_fuzz

REPO = Path(__file__).resolve().parents[1]


def fuzz(name: str, rules: settings, seed_value: int) -> tuple[Counter[str], list[str]]:
    """Every input Hypothesis makes for ``name`` (a reader, "options", "merge -o"), judged: tally, findings."""
    tally: Counter[str] = Counter()
    findings: list[str] = []

    def judge(verdict: Callable[[], str]) -> None:
        try:
            tally[verdict()] += 1
        except reader_fuzz.Finding as finding:
            tally["INTERNALERROR"] += 1
            findings.append(str(finding))

    if name == "options":

        @seed(seed_value)
        @rules
        @given(st.data())
        def options(data: st.DataObject) -> None:
            option = data.draw(st.sampled_from(reader_fuzz.VALUE_OPTIONS))
            raw = data.draw(reader_fuzz.option_values(option))
            judge(lambda: reader_fuzz.parse(option, raw))

        options()
    elif name == "merge -o":

        @seed(seed_value)
        @rules
        @given(reader_fuzz.output_paths())
        def outputs(given_path: str) -> None:
            judge(lambda: {"written": "read"}.get(reader_fuzz.merge_into(given_path), "refused"))

        outputs()
    else:

        @seed(seed_value)
        @rules
        @given(reader_fuzz.file_contents(reader_fuzz.READERS[name][0]))
        def reader(content: bytes) -> None:
            judge(lambda: reader_fuzz.read(name, content))

        reader()
    return tally, findings


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=2000, help="inputs per reader and for the option parsers")
    parser.add_argument("--seed", type=int, default=41)
    args = parser.parse_args()
    rules = settings(max_examples=args.examples, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    findings: list[str] = []
    total = 0
    started = time.monotonic()
    for name in [*reader_fuzz.READERS, "options", "merge -o"]:
        tally, found = fuzz(name, rules, args.seed)
        findings += found
        inputs = sum(tally.values())
        total += inputs
        print(
            f"{name:<20} {inputs:>6} inputs: {tally['read']:>5} read, {tally['refused']:>5} refused, "
            f"{tally['INTERNALERROR']} INTERNALERROR"
        )
    print(f"{total} inputs in {time.monotonic() - started:.0f} s, {len(findings)} INTERNALERROR")
    for finding in dict.fromkeys(findings):
        print(f"  {finding[:300]}")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
