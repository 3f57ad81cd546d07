"""The serving gate's noise and power: same against same N times, and one sequence at a time against the default.

Starts two real tiny-llama servers (vLLM's defaults, and ``--max-num-seqs 1``)
and runs ``pytest suites -m serving`` against them, reading every verdict by
contract id from the JUnit file, as our tests do:

1. ``--same-runs`` times (default 20) the default server as target and
   baseline: how many runs had a failure (false alarms; target 0) or an
   undecided throughput comparison, and the spread of the ratio's interval;
2. ``--worse-runs`` times (default 3) the one-sequence server against the
   default, at ``--requests`` requests a round: how often throughput and
   occupancy fail, and the ratio measured.

    python bench/serving_power.py [--python PYTHON_WITH_VLLM] [--same-runs N] [--worse-runs N] [--requests N]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from fixtures import tiny_models  # noqa: E402
from pytest_vllm_conformance.connection.launcher import VllmServer  # noqa: E402
from tests.support.verdicts import contract_runs  # noqa: E402

SERVE_ARGS = ("--dtype", "float32", "--enforce-eager", "--max-model-len", "512")
PROFILE = """profile: 1
name: serving-bench
serving: {{concurrency: 8, output_tokens: 64, requests: {requests}}}
"""


def run(target: str, baseline: str, workdir: Path, name: str) -> tuple[dict[str, str], str]:
    junit = workdir / f"{name}.xml"
    command = [sys.executable, "-m", "pytest", str(REPO / "suites"), "-m", "serving", f"--vllm-url={target}"]
    command += [f"--vllm-baseline-url={baseline}", f"--vllm-profile={workdir / 'profile.yaml'}"]
    command += [f"--junitxml={junit}", "-p", "no:cacheprovider", "-q"]
    subprocess.run(command, cwd=REPO, capture_output=True, check=False)
    runs = contract_runs(junit)
    compared = [r.properties for r in runs if r.contract == "serving.throughput_not_worse"]
    ratio = (
        f"ratio {compared[0].get('vllm_serving_throughput_ratio')}, "
        f"interval {compared[0].get('vllm_serving_throughput_ratio_interval')}"
        if compared
        else ""
    )
    return {r.contract: r.verdict for r in runs}, ratio


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", help="interpreter with vLLM (default: this one)")
    parser.add_argument("--same-runs", type=int, default=20)
    parser.add_argument("--worse-runs", type=int, default=3)
    parser.add_argument("--requests", type=int, default=16)
    args = parser.parse_args()
    model = str(tiny_models.build("tiny-llama"))
    with (
        tempfile.TemporaryDirectory() as tmp,
        VllmServer(model, SERVE_ARGS, python=args.python) as default,
        VllmServer(model, (*SERVE_ARGS, "--max-num-seqs", "1"), python=args.python) as one_seq,
    ):
        workdir = Path(tmp)
        (workdir / "profile.yaml").write_text(PROFILE.format(requests=args.requests))
        for label, target, runs in (("same", default, args.same_runs), ("one_seq", one_seq, args.worse_runs)):
            started, outcomes = time.monotonic(), []
            for index in range(runs):
                outcomes.append(run(target.url, default.url, workdir, f"{label}-{index}"))
            failed = sum(any(v == "failed" for v in verdicts.values()) for verdicts, _ in outcomes)
            throughput = [verdicts.get("serving.throughput_not_worse") for verdicts, _ in outcomes]
            ratios = [m for _, m in outcomes if m]
            print(
                f"{label}: {runs} runs in {time.monotonic() - started:.0f} s, {failed} with a failure; throughput "
                f"verdicts {sorted((v, throughput.count(v)) for v in set(throughput) if v)}; "
                f"occupancy {[verdicts.get('serving.occupancy') for verdicts, _ in outcomes]}"
            )
            print("    throughput ratios:", "; ".join(ratios))


if __name__ == "__main__":
    main()
