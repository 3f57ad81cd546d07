"""``vllm-conformance``: the installed suites, without a clone.

Equivalent to ``pytest SUITES ARGS``, SUITES the folder the catalogue reads
(``catalogue.contracts.suites_folder``): in a wheel the package's own, which is
``pytest --pyargs pytest_vllm_conformance.suites``; in a checkout ``suites/``.
``vllm-conformance merge REPORT... -o OUT`` merges shards' reports instead
(``reporting/merge.py``).
"""

from __future__ import annotations

import sys
from typing import Any

import pytest

USAGE = """\
usage: vllm-conformance [--vllm-url=URL | --vllm-serve=MODEL_DIR] [OPTION...]   run the installed suites
       vllm-conformance merge REPORT... -o OUT [--junit J... --junit-out J]   merge shards' reports

subcommands:
  merge     the --vllm-report files of shards run apart (a CI matrix, one per replica) into the report one
            run would give; exits 1 when a shard failed, 2 when the shards cannot make one report
            (vllm-conformance merge --help)

Without a subcommand: pytest over the installed suites (pytest --pyargs pytest_vllm_conformance.suites);
every pytest option and the plugin's --vllm-* options (group "vLLM conformance") follow.
"""


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] != ["merge"] and {"-h", "--help"}.intersection(args):
        print(USAGE)
    if args[:1] == ["merge"]:
        from pytest_vllm_conformance.reporting import merge

        return merge.main(args[1:], compare=compare_replicas)
    from pytest_vllm_conformance.catalogue.contracts import suites_folder

    return int(pytest.main([str(suites_folder()), "-p", "no:cacheprovider", *args]))


def compare_replicas(observed: dict[str, dict[str, Any] | None], rules: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """Shards' replicas judged as suites/fleet/test_fleet.py judges a run's replicas: each one's outcome and why."""
    from pytest_vllm_conformance.observed import replicas as fleet  # only a merge needs it: the command starts lean

    members = tuple(
        fleet.Member(url, seen, None if seen else "its shard recorded no observation") for url, seen in observed.items()
    )
    declared = fleet.Declared(
        max_model_len=rules.get("max_model_len"),
        auth=rules.get("auth"),
        scale_out=rules.get("scale_out"),
        allowed_versions=tuple(rules.get("allowed_versions") or ()),
        reference=rules.get("reference"),
        ignore=tuple(rules.get("ignore") or ()),
    )
    outcomes = {fleet.AGREES: "passed", fleet.UNDECIDED: "undecided", fleet.ODD: "failed", fleet.SPLIT: "failed"}
    return {
        name: (outcomes[judgement.outcome], "" if judgement.outcome == fleet.AGREES else judgement.message)
        for name, judgement in fleet.decide(fleet.Fleet(members), declared).items()
    }


if __name__ == "__main__":
    sys.exit(main())
