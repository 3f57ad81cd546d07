"""AIPerf, a real load generator, witnesses our serving figures on a real server (opt-in: make test-loadgen-witness).

One tiny-llama 0.32 server (the pool's "plain", with the tests' shared-machine settings). Our closed loop (the
serving suite's: ``ClosedLoop`` on the workload ``rounds.plan`` builds) and AIPerf 0.13.0 (its own venv) take turns
at one workload: streamed /v1/completions, 32 prompt tokens, 64 output tokens with ignore_eos, concurrency 8, 128
requests after 8 of warm-up; WITNESS_RUNS runs of AIPerf, each between two of ours and compared with their
geometric mean (witness.between: a machine growing busier or quieter weighs on both sides alike). The objective is
set from a first run of ours (TTFT and time per output token each at its 75th percentile there), so that goodput
lies between 0 and 1, where a disagreement shows. Per figure, the median over the runs of AIPerf's over ours must
lie within TOLERANCE of 1 (output throughput, TTFT p50, time per output token p50), and the goodput shares within
SHARE_TOLERANCE.

What differs, by construction: our prompts are token ids cycled from the serving_prompt_seed text, AIPerf's are
text of its own corpus cut to exactly 32 tokens of the model's tokenizer (the server counted 32 prompt tokens for
every request of both, which the test checks); AIPerf's client is several processes (workers, record processors,
a timing manager) on the same two cores as the server, ours one asyncio loop.

A witness behind a slower path disagrees: AIPerf through a relay that holds each completion 500 ms measures a
TTFT the comparison puts outside the tolerance, named (so the agreement above is one that could fail).

Needs a venv with aiperf (``make test-loadgen-witness`` builds one and sets VLLM_CONFORMANCE_AIPERF to its
``aiperf``).
"""

from __future__ import annotations

import pytest

from fixtures import executable_from_env
from fixtures import loadgen_witness as aiperf
from fixtures.fault_proxy import Delay, FaultProxy
from fixtures.loadgen_witness import AIPERF_ENV_VAR, WitnessWorkload
from suites.serving import witness
from tests.conftest import requires_vllm

AIPERF = executable_from_env(AIPERF_ENV_VAR)

pytestmark = [
    pytest.mark.server,
    pytest.mark.loadgen_witness,
    requires_vllm,
    pytest.mark.skipif(not AIPERF, reason=f"set {AIPERF_ENV_VAR} to the aiperf of a venv with aiperf"),
    pytest.mark.servers("plain"),
]

WORKLOAD = WitnessWorkload(prompt_tokens=32, output_tokens=64, concurrency=8, requests=128, warm_up_requests=8)
WITNESS_RUNS = 4
# Measured on this 2-core machine shared with other servers (load average 7 to 20; docs/serving.md "The load
# generator"): medians of AIPerf's over ours from 0.51 (TTFT) to 1.48 (throughput), goodput shares within 8 points.
TOLERANCE = 0.6
SHARE_TOLERANCE = 0.2
# Far outside that: the relay's hold is TTFT p50 several times over at this workload.
RELAY_HOLDS = 0.5


def witnessed(url, model, tokenizer, slo, out, seed):
    """One AIPerf run at the workload (its synthetic prompts drawn with ``seed``), read back."""
    assert AIPERF is not None
    return witness.read_aiperf(aiperf.run(AIPERF, url, model, tokenizer, WORKLOAD, slo, out, seed=seed))


def test_aiperf_agrees_with_our_throughput_ttft_time_per_token_and_goodput(served, tiny_models, tmp_path):
    plain = served("plain")
    with aiperf.OurLoop(plain.url, WORKLOAD) as ours:
        slo = ours.objective()
        mine = [ours.figures(slo)]
        theirs = []
        for number in range(WITNESS_RUNS):  # ours, AIPerf, ours, AIPerf, ..., ours
            theirs.append(
                witnessed(plain.url, plain.served_model, tiny_models["tiny-llama"], slo, tmp_path / f"{number}", number)
            )
            mine.append(ours.figures(slo))
    pairs = [(witness.between(before, after), run) for before, after, run in zip(mine, mine[1:], theirs, strict=False)]
    for figures in [*mine, *theirs]:
        print(figures.line())
    agreement = witness.agreement(pairs)
    print(agreement)
    # The same workload as the server counted it, on both sides.
    for figures in [*mine, *theirs]:
        assert figures.prompt_tokens == (WORKLOAD.prompt_tokens,) * 2, figures
        assert figures.output_tokens == (WORKLOAD.output_tokens,) * 2, figures
    assert agreement.outside(TOLERANCE, SHARE_TOLERANCE) == [], agreement


def test_a_witness_behind_a_slower_path_disagrees_and_is_named(served, tiny_models, tmp_path):
    plain = served("plain")
    with aiperf.OurLoop(plain.url, WORKLOAD) as ours:
        slo = ours.objective()
        mine = ours.figures(slo)
        with FaultProxy(plain.url, rules=[Delay(seconds=RELAY_HOLDS, path="/v1/completions")]) as relay:
            theirs = witnessed(relay.url, plain.served_model, tiny_models["tiny-llama"], slo, tmp_path / "relayed", 99)
    outside = witness.agreement([(mine, theirs)]).outside(TOLERANCE, SHARE_TOLERANCE)
    assert any(line.startswith("TTFT p50: witness/ours") for line in outside), outside
