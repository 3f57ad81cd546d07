"""The serving gate's noise and power: same against same N times, one sequence at a time against the default,
and the requests a gate needs to detect a 20 % throughput loss and a 100 ms TTFT increase.

Starts two real tiny-llama servers (vLLM's defaults, and ``--max-num-seqs 1``;
with our tests' thread settings, ``SHARED_MACHINE_ENV``, unless
``--vllm-defaults``: on two cores vLLM's CPU defaults bind the server's
threads to the cores the client also needs, and the measurement then shows
that fight more than the gate) and runs ``pytest suites -m serving`` against them, reading every verdict by
contract id from the JUnit file, as our tests do:

1. ``--same-runs`` times (default 20) the default server as target and
   baseline: how many runs had a failure (false alarms; target 0) or an
   undecided throughput comparison, and the spread of the ratio's interval;
2. ``--worse-runs`` times (default 3) the one-sequence server against the
   default, at ``--requests`` requests a round: how often throughput and
   occupancy fail, and the ratio measured. Each run has ``--rounds`` round
   pairs (the gate's default, 4);
3. detection power, from the rounds the same-server runs measured (each run
   saves its target's rounds with ``--vllm-perf-save``; with ``--rounds 4``
   or more, its rounds 2 and 3 ran back to back, as a gate's interleaved
   pair; with 2, rounds 1 and 2 had the baseline's between them, and the
   figures err on the noisy side): for 2, 4 and 8
   round pairs of 8, 16 or 32 requests, real pairs are drawn, the shift
   applied to one side (output rates times 0.8; 100 ms added to each time to
   first token), and the gate's own judgement run: throughput by its
   comparison (``compare_medians``: its confidence, every round pair
   agreeing), time to first token by the latency contract against an
   objective 50 ms above the p50 measured. Printed: how often it decides
   "worse" with the shift and without it (false alarms), the serving seconds
   such a gate costs here, and the cheapest gate that detects the shift 9
   times in 10 with at most 5 % false alarms. ``--power-from DIR`` reads the
   saved runs of an earlier bench (``--keep DIR``) instead of measuring.

    python bench/serving_power.py [--python PYTHON_WITH_VLLM] [--same-runs N] [--worse-runs N] [--requests N]
                                  [--vllm-defaults] [--keep DIR | --power-from DIR]
"""

from __future__ import annotations

import argparse
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from fixtures import tiny_models  # noqa: E402
from pytest_vllm_conformance.connection.launcher import VllmServer  # noqa: E402
from pytest_vllm_conformance.features.serving.baseline_file import PerfRecording  # noqa: E402
from pytest_vllm_conformance.features.serving.loadgen import Round  # noqa: E402
from pytest_vllm_conformance.features.serving.stats import compare_medians, percentile  # noqa: E402
from tests.support.servers import SHARED_MACHINE_ENV  # noqa: E402
from tests.support.verdicts import contract_runs  # noqa: E402

SERVE_ARGS = ("--dtype", "float32", "--enforce-eager", "--max-model-len", "512")
PROFILE = """profile: 1
name: serving-bench
serving: {{concurrency: 8, output_tokens: 64, requests: {requests}, rounds: {rounds}}}
"""
# The gate's own confidence (contracts.yaml's serving policy), and the shifts to detect.
CONFIDENCE = 0.95
THROUGHPUT_LOSS, TTFT_INCREASE = 0.2, 0.1
# A 20 % loss sits on the default floor (max_slowdown 0.2: the interval must lie below 0.8); a gate meant to
# catch it declares a smaller max_slowdown. The power figures use this one.
MAX_SLOWDOWN = 0.1
TRIALS, POWER = 400, 0.9


def run(target: str, baseline: str, workdir: Path, name: str) -> tuple[dict[str, str], str]:
    junit = workdir / f"{name}.xml"
    command = [sys.executable, "-m", "pytest", str(REPO / "suites"), "-m", "serving", f"--vllm-url={target}"]
    command += [f"--vllm-baseline-url={baseline}", f"--vllm-profile={workdir / 'profile.yaml'}"]
    command += [f"--vllm-perf-save={workdir / f'{name}.perf.json'}"]
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


def _draw(measured: Round, n: int, rng: random.Random) -> list:
    done = [t for t in measured.timings if not t.error and t.output_rate and t.ttft is not None]
    return rng.sample(done, min(n, len(done)))


def detected(pairs: list[tuple[Round, Round]], rounds: int, n: int, shift: str, size: float, rng: random.Random):
    """How often the gate fails a target shifted by ``size``, over TRIALS gates of ``rounds`` round pairs of n
    requests: throughput by the comparison with the baseline (``compare_medians``), time to first token by the
    latency contract's objective (``ttft_p50_seconds``), set half the shift above the measured p50."""
    objective = median_ttft(pairs) + TTFT_INCREASE / 2
    worse = 0
    for _ in range(TRIALS):
        drawn = [pair if rng.random() < 0.5 else pair[::-1] for pair in rng.sample(pairs, rounds)]
        sides = [(_draw(a, n, rng), _draw(b, n, rng)) for a, b in drawn]
        if shift == "ttft":
            worse += percentile([t.ttft + size for a, _ in sides for t in a], 50) > objective
            continue
        values = [([t.output_rate * (1 - size) for t in a], [t.output_rate for t in b]) for a, b in sides]
        compared = compare_medians(
            [v for a, _ in values for v in a],
            [v for _, b in values for v in b],
            confidence=CONFIDENCE,
            max_slowdown=MAX_SLOWDOWN,
            round_pairs=values,
        )
        worse += compared is not None and compared.verdict == "worse"
    return worse / TRIALS


def median_ttft(pairs: list[tuple[Round, Round]]) -> float:
    return statistics.median(t.ttft for pair in pairs for r in pair for t in r.timings if t.ttft is not None)


def power_table(pairs: list[tuple[Round, Round]], measured_n: int, round_seconds: float, apart: str) -> None:
    """Detection and false alarms by round pairs and requests a round, and the cheapest gate that detects."""
    print(
        f"detection power: {len(pairs)} same-server round pairs{apart}, drawn {TRIALS} times per cell, "
        f"{CONFIDENCE:.0%} interval, every round pair agreeing"
    )
    rng = random.Random(20261204)
    sizes = [n for n in (8, 16, 32, 64) if n <= measured_n]
    for shift, size, label in (
        ("throughput", THROUGHPUT_LOSS, f"a {THROUGHPUT_LOSS:.0%} throughput loss, max_slowdown {MAX_SLOWDOWN}"),
        (
            "ttft",
            TTFT_INCREASE,
            f"a {TTFT_INCREASE * 1000:.0f} ms TTFT increase, against a TTFT p50 objective "
            f"{TTFT_INCREASE * 500:.0f} ms above the measured {median_ttft(pairs) * 1000:.0f} ms",
        ),
    ):
        print(f"  {label}: detected / false alarms (no shift), and seconds of serving a gate")
        found = []
        for rounds in (r for r in (2, 4, 8) if r <= len(pairs)):
            cells = []
            for n in sizes:
                power = detected(pairs, rounds, n, shift, size, rng)
                null = detected(pairs, rounds, n, shift, 0.0, rng)
                seconds = 2 * rounds * round_seconds * n / measured_n
                cells.append(f"{n} requests {power:.0%} / {null:.1%} ({seconds:.0f} s)")
                if power >= POWER and null <= 1 - CONFIDENCE:
                    found.append((seconds, rounds, n))
            print(f"    {rounds} round pairs: " + "; ".join(cells))
        if found:
            seconds, rounds, n = min(found)
            print(
                f"    -> cheapest that detects it {POWER:.0%} of the time with at most {1 - CONFIDENCE:.0%} false "
                f"alarms: {rounds} round pairs of {n} requests, about {seconds:.0f} s of serving"
            )
        else:
            print(f"    -> no gate up to 8 round pairs of {sizes[-1]} requests detects it {POWER:.0%} of the time")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", help="interpreter with vLLM (default: this one)")
    parser.add_argument("--same-runs", type=int, default=20)
    parser.add_argument("--worse-runs", type=int, default=3)
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=4, help="round pairs a run (the gate's default: 4)")
    parser.add_argument(
        "--vllm-defaults",
        action="store_true",
        help="vLLM's CPU thread settings instead of our tests' (which keep the servers off the client's core)",
    )
    parser.add_argument("--keep", type=Path, help="keep the runs' JUnit and saved rounds in DIR")
    parser.add_argument("--power-from", type=Path, help="only the detection power, from an earlier --keep DIR")
    args = parser.parse_args()
    if args.power_from:
        report_power(args.power_from, len(list(args.power_from.glob("same-*.perf.json"))), args.requests)
        return
    env = None if args.vllm_defaults else SHARED_MACHINE_ENV
    model = str(tiny_models.build("tiny-llama"))
    with (
        tempfile.TemporaryDirectory() as tmp,
        VllmServer(model, SERVE_ARGS, python=args.python, env=env) as default,
        VllmServer(model, (*SERVE_ARGS, "--max-num-seqs", "1"), python=args.python, env=env) as one_seq,
    ):
        assert default.url and one_seq.url, "a server that started has its URL"
        workdir = args.keep or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "profile.yaml").write_text(PROFILE.format(requests=args.requests, rounds=args.rounds))
        for label, target, runs in (("same", default.url, args.same_runs), ("one_seq", one_seq.url, args.worse_runs)):
            started, outcomes = time.monotonic(), []
            for index in range(runs):
                outcomes.append(run(target, default.url, workdir, f"{label}-{index}"))
            failed = sum(any(v == "failed" for v in verdicts.values()) for verdicts, _ in outcomes)
            throughput = [verdicts.get("serving.throughput_not_worse") for verdicts, _ in outcomes]
            ratios = [m for _, m in outcomes if m]
            print(
                f"{label}: {runs} runs in {time.monotonic() - started:.0f} s, {failed} with a failure; throughput "
                f"verdicts {sorted((v, throughput.count(v)) for v in set(throughput) if v)}; "
                f"occupancy {[verdicts.get('serving.occupancy') for verdicts, _ in outcomes]}"
            )
            print("    throughput ratios:", "; ".join(ratios))
        report_power(workdir, args.same_runs, args.requests)


def report_power(workdir: Path, runs: int, requests: int) -> None:
    saved = [workdir / f"same-{index}.perf.json" for index in range(runs)]
    recorded = [PerfRecording.load(path).rounds for path in saved if path.exists()]
    # Interleaved A B, B A, A B, ...: a run's target rounds 2 and 3, 4 and 5, ... ran back to back, as a gate's
    # interleaved pair does. A run of two rounds has only rounds 1 and 2, with the baseline's two between.
    adjacent = [(rounds[i], rounds[i + 1]) for rounds in recorded for i in range(1, len(rounds) - 1, 2)]
    pairs = adjacent or [(rounds[0], rounds[1]) for rounds in recorded if len(rounds) >= 2]
    apart = "" if adjacent else "; each pair's rounds had the baseline's two between them: noisier than a gate's"
    if len(pairs) < 2:
        print(f"detection power: only {len(pairs)} round pairs saved; nothing to draw from")
        return
    power_table(pairs, requests, statistics.median(r.seconds for pair in pairs for r in pair), apart)


if __name__ == "__main__":
    main()
