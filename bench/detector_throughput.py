"""Throughput of our watermark detector vs vLLM's own, on the same tokens.

    python -m bench.detector_throughput [--tokens 100000] [--repeats 3]

Prints tokens/s for each detector and the ratio ours / vLLM's (target >= 1).
vLLM's column is skipped, with a message, when ``vllm.v1.watermarking`` is not
importable (vLLM 0.30+ with torch is needed for it).
"""

from __future__ import annotations

import argparse
import functools
import importlib
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from pytest_vllm_conformance.watermark import make_detector

# Any fixed value works: this only has to be the same key for both detectors.
BENCH_KEY = 0x5EED_0F_BE_7C_4A11
VOCAB_SIZE = 32_000
CONTEXT_WIDTH = 4
ALPHA = 0.1


def make_tokens(count: int, seed: int = 0) -> list[int]:
    """Deterministic token ids with some repeated phrases, so dedup has work."""
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, VOCAB_SIZE, size=count, dtype=np.int64)
    # Copy a few short spans onto later positions to create repeated contexts.
    for _ in range(count // 200):
        length = int(rng.integers(5, 20))
        source = int(rng.integers(0, count - length))
        target = int(rng.integers(0, count - length))
        tokens[target : target + length] = tokens[source : source + length]
    return tokens.tolist()


def best_rate(run: Callable[[], Any], tokens: int, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - started)
    return tokens / best


def load_vllm_detectors() -> dict[str, Callable[[], Any]] | str:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            gumbel = importlib.import_module("vllm.v1.watermarking.gumbel")
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    torch = importlib.import_module("torch")
    print(f"vLLM's detector runs with torch's default {torch.get_num_threads()} thread(s)")
    return {
        "gumbel": lambda: gumbel.GumbelWatermarkDetector(BENCH_KEY, context_width=CONTEXT_WIDTH),
        "dual_key_gumbel": lambda: gumbel.DualKeyGumbelWatermarkDetector(
            BENCH_KEY, context_width=CONTEXT_WIDTH, alpha=ALPHA
        ),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)

    tokens = make_tokens(args.tokens)
    vllm = load_vllm_detectors()
    if isinstance(vllm, str):
        print(f"vLLM detector not importable, its column is skipped ({vllm})")

    print(f"{args.tokens} tokens, context_width={CONTEXT_WIDTH}, best of {args.repeats}")
    print(f"{'algorithm':<16} {'ours tok/s':>14} {'vLLM tok/s':>14} {'ours/vLLM':>10}")
    for algorithm in ("gumbel", "dual_key_gumbel"):
        kwargs: dict[str, Any] = {"context_width": CONTEXT_WIDTH}
        if algorithm == "dual_key_gumbel":
            kwargs["alpha"] = ALPHA
        ours = make_detector(algorithm, BENCH_KEY, **kwargs)
        ours_result = ours.detect(tokens)
        ours_rate = best_rate(functools.partial(ours.detect, tokens), len(tokens), args.repeats)
        if isinstance(vllm, str):
            print(f"{algorithm:<16} {ours_rate:>14,.0f} {'-':>14} {'-':>10}")
            continue
        theirs = vllm[algorithm]()
        theirs_result = theirs.detect(tokens)
        theirs_rate = best_rate(functools.partial(theirs.detect, tokens), len(tokens), args.repeats)
        print(f"{algorithm:<16} {ours_rate:>14,.0f} {theirs_rate:>14,.0f} {ours_rate / theirs_rate:>10.2f}")
        # A speed comparison is only meaningful if both computed the same thing.
        if (
            ours_result.num_scored_tokens != theirs_result.num_scored_tokens
            or abs(ours_result.score - theirs_result.score) > 1e-9 * abs(theirs_result.score)
            or abs(ours_result.p_value - theirs_result.p_value) > 1e-9
        ):
            print(f"  WARNING: results differ: ours={ours_result} vLLM={theirs_result}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
