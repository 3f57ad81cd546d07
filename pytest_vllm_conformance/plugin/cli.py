"""``vllm-conformance``: the installed suites, without a clone.

Equivalent to ``pytest --pyargs pytest_vllm_conformance.suites ARGS``.
``vllm-conformance merge REPORT... -o OUT`` merges shards' reports instead
(``reporting/merge.py``).
"""

from __future__ import annotations

import sys

import pytest


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["merge"]:
        from pytest_vllm_conformance.reporting import merge

        return merge.main(args[1:])
    return int(pytest.main(["--pyargs", "pytest_vllm_conformance.suites", "-p", "no:cacheprovider", *args]))


if __name__ == "__main__":
    sys.exit(main())
