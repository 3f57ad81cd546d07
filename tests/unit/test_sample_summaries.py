"""The terminal summaries README and docs/reports.md show are what a run prints.

The sample's feature lines are those of the stand-in tests (reporting_stand_ins.py), run here
for real; "..." stands for the lines left out, and the server's line (the stand-ins have no
server) must have the reporter's shape. README once showed "success  4 passed" where a run
prints "2 of 2 checked: 2 passed".
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.unit.reporting_stand_ins import STAND_INS

REPO = Path(__file__).resolve().parents[2]
SERVER_LINE = re.compile(r"vLLM \S+, model \S+, at https?://\S+ \((profile \S+|no profile)\)")


def sample(path: Path) -> list[str]:
    """The indented summary block of ``path``, without its four-space indent."""
    lines = path.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if "vLLM conformance: " in line and line.startswith("    ---"))
    block = []
    for line in lines[start:]:
        if not line.startswith("    "):
            break
        block.append(line[4:])
    return block


@pytest.fixture
def real_summary(pytester, clean_env) -> list[str]:
    pytester.makepyfile(test_stand_ins=STAND_INS)
    result = pytester.runpytest("-p", "no:cacheprovider", "--vllm-report=reports/vllm-conformance.yaml")
    out = result.stdout.str().replace(str(pytester.path), "/ci").splitlines()
    start = next(i for i, line in enumerate(out) if " vLLM conformance: " in line)
    end = next(i for i, line in enumerate(out) if line.startswith("report: "))
    return out[start : end + 1]


@pytest.mark.parametrize("doc", ["README.md", "docs/reports.md"])
def test_the_sample_summary_is_what_a_run_prints(real_summary, doc):
    shown = sample(REPO / doc)
    assert shown[0] == real_summary[0], "the title line"
    assert SERVER_LINE.fullmatch(shown[1]), shown[1]
    assert shown[-1] == real_summary[-1], "the report line"
    # The feature lines, in the run's order, each as printed; "..." leaves the rest out.
    features = [line for line in shown[2:-1] if line.strip() != "..."]
    printed = iter(real_summary)
    assert all(line in printed for line in features), (features, real_summary)
