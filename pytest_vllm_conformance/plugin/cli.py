"""``vllm-conformance``: the installed suites, without a clone.

Equivalent to ``pytest --pyargs pytest_vllm_conformance.suites ARGS``.
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
    return int(pytest.main(["--pyargs", "pytest_vllm_conformance.suites", "-p", "no:cacheprovider", *args]))


def compare_replicas(
    reference: str, reference_observed: dict[str, Any], replica: str, observed: dict[str, Any], rules: dict[str, Any]
) -> str | None:
    """Two shards' replicas judged as suites/test_fleet.py judges two replicas of one run: what differs, or None."""
    from pytest_vllm_conformance.features import fleet  # only a merge needs it: the command starts lean

    allowed = rules.get("allowed_versions")
    outside = [
        f"{name}: {seen.get('vllm_version') or 'unknown'}"
        for name, seen in ((reference, reference_observed), (replica, observed))
        if allowed and not fleet.version_allowed(seen.get("vllm_version"), allowed)
    ]
    if outside:
        return f"version(s) outside fleet.allowed_versions {allowed}: {'; '.join(outside)}"
    found = fleet.skew(reference_observed, observed, allowed, rules.get("ignore") or [])
    return fleet.side_by_side(reference, replica, found) if found else None


if __name__ == "__main__":
    sys.exit(main())
