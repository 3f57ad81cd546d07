"""The serving gate's noise and power at the defaults: same against same N times, one sequence at a time against
the default, the requests a gate needs to detect a 20 % throughput loss, and how often a loss just past
``max_slowdown`` passes.

Starts two real tiny-llama servers (vLLM's defaults, and ``--max-num-seqs 1``;
with our tests' thread settings, ``SHARED_MACHINE_ENV``, unless
``--vllm-defaults``: on two cores vLLM's CPU defaults bind the server's
threads to the cores the client also needs, and the measurement then shows
that fight more than the gate) and runs ``pytest suites -m serving`` against them, reading every verdict by
contract id from the JUnit file, as our tests do. The profile declares ``concurrency: 8`` and nothing else
unless ``--requests``, ``--rounds`` or ``--output-tokens`` is given: every other key is the catalogue's default
(32 prompt and 16 output tokens, 32 requests a round, 4 round pairs, ``max_slowdown`` 0.2).

1. ``--same-runs`` times (default 20) the default server as target and
   baseline (``--vllm-baseline-is-target``): how many runs had a failure (false alarms; target 0) or an
   undecided throughput comparison, and the spread of the ratio's interval;
2. ``--worse-runs`` times (default 3) the one-sequence server against the
   default: how often throughput and occupancy fail, and the ratio measured;
3. from the rounds the same-server runs measured (each run saves its target's rounds with ``--vllm-perf-save``;
   its rounds 2 and 3, 4 and 5 ran back to back, as a gate's interleaved pair): real pairs are drawn, one side's
   output rates scaled, and the gate's own comparison run (``compare_medians``: its confidence, every round pair
   agreeing). Printed: (a) at the gate's defaults, a loss just past ``max_slowdown`` (``--past``, default 0.25
   against 0.2): how often it is failed, undecided and **passed** (a false pass: the figure the gate must keep
   at 0); (b) for 2, 4 and 8 round pairs of 8 to 32 requests, how often a 20 % loss is failed against
   ``max_slowdown: 0.1`` and how often no loss is (false alarms). ``--power-from DIR`` reads the saved runs of
   an earlier bench (``--keep DIR``) instead of measuring.

    python -m bench.serving_power [--python PYTHON_WITH_VLLM] [--same-runs N] [--worse-runs N] [--requests N]
                                  [--rounds N] [--output-tokens N] [--past LOSS] [--vllm-defaults]
                                  [--keep DIR | --power-from DIR]
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

from fixtures import tiny_models
from fixtures.server_specs import SHARED_MACHINE_ENV
from fixtures.verdicts import contract_runs
from pytest_vllm_conformance.connection.launcher import VllmServer
from pytest_vllm_conformance.features.serving.loadgen import Round
from pytest_vllm_conformance.features.serving.saved_rounds import PerfRecording
from pytest_vllm_conformance.features.serving.stats import compare_medians

REPO = Path(__file__).resolve().parents[1]

SERVE_ARGS = ("--dtype", "float32", "--enforce-eager", "--max-model-len", "512")
# The gate's own defaults (declarations.yaml's serving policy): what a profile that declares only the concurrency gets.
DEFAULT_REQUESTS, DEFAULT_ROUNDS, DEFAULT_MAX_SLOWDOWN, CONFIDENCE = 32, 4, 0.2, 0.95
THROUGHPUT_LOSS = 0.2
# A 20 % loss sits on the default floor (max_slowdown 0.2: the interval must lie below 0.8); a gate meant to
# catch it declares a smaller max_slowdown. The power figures use this one.
MAX_SLOWDOWN = 0.1
TRIALS, POWER = 400, 0.9


def profile(requests: int | None, rounds: int | None, output_tokens: int | None) -> str:
    """``concurrency: 8`` and only the keys asked for: the rest are the catalogue's defaults."""
    declared = {"concurrency": 8, "requests": requests, "rounds": rounds, "output_tokens": output_tokens}
    keys = ", ".join(f"{key}: {value}" for key, value in declared.items() if value is not None)
    return f"profile: 1\nname: serving-bench\nserving: {{{keys}}}\n"


def run(target: str, baseline: str, workdir: Path, name: str) -> tuple[dict[str, str], str]:
    junit = workdir / f"{name}.xml"
    command = [sys.executable, "-m", "pytest", str(REPO / "suites"), "-m", "serving", f"--vllm-url={target}"]
    command += [f"--vllm-baseline-url={baseline}", f"--vllm-profile={workdir / 'profile.yaml'}"]
    command += ["--vllm-baseline-is-target"] if target == baseline else []
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


def judged(
    pairs: list[tuple[Round, Round]], rounds: int, n: int, loss: float, max_slowdown: float, rng: random.Random
) -> dict[str, float]:
    """Over TRIALS gates of ``rounds`` drawn round pairs of ``n`` requests, the target's output rates times
    ``1 - loss``: the share of each verdict of the gate's comparison (``worse``, ``not worse``, ``undecided``)."""
    counts = {"worse": 0, "not worse": 0, "undecided": 0}
    for _ in range(TRIALS):
        drawn = [pair if rng.random() < 0.5 else pair[::-1] for pair in rng.sample(pairs, rounds)]
        sides = [(_draw(a, n, rng), _draw(b, n, rng)) for a, b in drawn]
        values = [([t.output_rate * (1 - loss) for t in a], [t.output_rate for t in b]) for a, b in sides]
        compared = compare_medians(
            [v for a, _ in values for v in a],
            [v for _, b in values for v in b],
            confidence=CONFIDENCE,
            max_slowdown=max_slowdown,
            round_pairs=values,
        )
        counts[compared.verdict if compared is not None else "undecided"] += 1
    return {verdict: count / TRIALS for verdict, count in counts.items()}


def power_table(pairs: list[tuple[Round, Round]], measured_n: int, round_seconds: float, past: float) -> None:
    """A loss just past the default floor at the defaults (false passes), then detection and false alarms of a
    20 % loss by round pairs and requests a round, and the cheapest gate that detects it."""
    print(
        f"from {len(pairs)} same-server round pairs, drawn {TRIALS} times per cell, {CONFIDENCE:.0%} interval, "
        "every round pair agreeing"
    )
    rng = random.Random(20261204)
    rounds, n = min(DEFAULT_ROUNDS, len(pairs)), min(DEFAULT_REQUESTS, measured_n)
    shares = judged(pairs, rounds, n, past, DEFAULT_MAX_SLOWDOWN, rng)
    print(
        f"  a {past:.0%} loss against max_slowdown {DEFAULT_MAX_SLOWDOWN} ({rounds} round pairs of {n} requests): "
        f"failed {shares['worse']:.1%}, undecided {shares['undecided']:.1%}, passed {shares['not worse']:.1%} "
        "(false passes)"
    )
    print(
        f"  a {THROUGHPUT_LOSS:.0%} loss, max_slowdown {MAX_SLOWDOWN}: detected / false alarms (no loss), "
        "and seconds of serving a gate"
    )
    sizes = [size for size in (8, 16, 32, 64) if size <= measured_n]
    found = []
    for count in (r for r in (2, 4, 8) if r <= len(pairs)):
        cells = []
        for size in sizes:
            power = judged(pairs, count, size, THROUGHPUT_LOSS, MAX_SLOWDOWN, rng)["worse"]
            null = judged(pairs, count, size, 0.0, MAX_SLOWDOWN, rng)["worse"]
            seconds = 2 * count * round_seconds * size / measured_n
            cells.append(f"{size} requests {power:.0%} / {null:.1%} ({seconds:.0f} s)")
            if power >= POWER and null <= 1 - CONFIDENCE:
                found.append((seconds, count, size))
        print(f"    {count} round pairs: " + "; ".join(cells))
    if found:
        seconds, count, size = min(found)
        print(f"    -> cheapest detecting it {POWER:.0%} of the time: {count} pairs of {size}, about {seconds:.0f} s")
    else:
        print(f"    -> no gate up to 8 round pairs of {sizes[-1]} requests detects it {POWER:.0%} of the time")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", help="interpreter with vLLM (default: this one)")
    parser.add_argument("--same-runs", type=int, default=20)
    parser.add_argument("--worse-runs", type=int, default=3)
    parser.add_argument("--requests", type=int, help="requests a round (default: the gate's, 32)")
    parser.add_argument("--rounds", type=int, help="round pairs a run (default: the gate's, 4)")
    parser.add_argument("--output-tokens", type=int, help="output tokens a request (default: the gate's, 16)")
    parser.add_argument("--past", type=float, default=0.25, help="the loss just past max_slowdown 0.2 (0.25)")
    parser.add_argument(
        "--vllm-defaults",
        action="store_true",
        help="vLLM's CPU thread settings instead of our tests' (which keep the servers off the client's core)",
    )
    parser.add_argument("--keep", type=Path, help="keep the runs' JUnit and saved rounds in DIR")
    parser.add_argument("--power-from", type=Path, help="only the detection power, from an earlier --keep DIR")
    args = parser.parse_args()
    requests = args.requests or DEFAULT_REQUESTS
    if args.power_from:
        report_power(args.power_from, len(list(args.power_from.glob("same-*.perf.json"))), requests, args.past)
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
        (workdir / "profile.yaml").write_text(profile(args.requests, args.rounds, args.output_tokens))
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
        report_power(workdir, args.same_runs, requests, args.past)


def report_power(workdir: Path, runs: int, requests: int, past: float) -> None:
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
    print(f"round pairs{apart or ': adjacent target rounds of each run'}")
    power_table(pairs, requests, statistics.median(r.seconds for pair in pairs for r in pair), past)


if __name__ == "__main__":
    main()
