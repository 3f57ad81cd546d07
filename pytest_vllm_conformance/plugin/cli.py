"""``vllm-conformance``: the installed suites, without a clone.

Equivalent to ``pytest --pyargs pytest_vllm_conformance.suites ARGS``.
"""

from __future__ import annotations

import sys

import pytest


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    return int(pytest.main(["--pyargs", "pytest_vllm_conformance.suites", "-p", "no:cacheprovider", *args]))


if __name__ == "__main__":
    sys.exit(main())
