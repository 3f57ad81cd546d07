"""How the server serves: load success, latency objectives, occupancy, throughput against a baseline, progress.

Opt-in: a measurement costs server time, so the suite runs only where the
profile declares ``serving: {concurrency: N}``. The workload is a closed
loop of streamed completions of exact token-id prompts with ``ignore_eos``;
its warm-up is discarded; rounds on the target and on --vllm-baseline-url
are interleaved (or compared with a run saved by --vllm-perf-save, given as
--vllm-perf-baseline-file). Nothing else may talk to the server meanwhile
(``vllm_exclusive``). docs/serving.md explains the figures.
"""

import pytest

from pytest_vllm_conformance import contract, undecided

from . import capacity_run, figures, open_loop, serving_run, witness
from . import rounds as measured_rounds
from .stats import MIN_PAIRS


@pytest.fixture(scope="module")
def declared(vllm_expect):
    return {key: vllm_expect.declared("serving", key) for key in serving_run.KEYS}


@pytest.fixture(scope="module")
def serving(
    declared, vllm_settings, vllm_client, vllm_ingress_client, vllm_facts, vllm_expect, vllm_exclusive, vllm_progress
):
    with vllm_exclusive():
        try:
            return serving_run.serve(
                _values(declared),
                settings=vllm_settings,
                facts=vllm_facts,
                expect=vllm_expect,
                client=vllm_client,
                ingress_client=vllm_ingress_client,
                progress=vllm_progress.phase("the serving measurement"),
            )
        except measured_rounds.NoPrompt as exc:
            pytest.fail(f"the workload cannot be built: {exc}", pytrace=False)


@contract("serving.load_success")
def test_load_success(serving, declared, vllm_record, vllm_evidence):
    run = serving.run
    timings = run.warm_up + run.requests("target") + run.requests("direct")
    failed = figures.load_failures(timings, declared["prompt_tokens"].value, declared["output_tokens"].value)
    vllm_record("figures", f"{len(timings) - len(failed)} of {len(timings)} requests completed as pinned")
    if serving.saved_to:
        vllm_record("serving_saved_to", serving.saved_to)
    assert timings, "the workload sent no request"
    assert not failed, f"{len(failed)} of {len(timings)} requests did not complete as pinned: " + "; ".join(failed[:5])
    vllm_evidence.judged(len(timings), "requests", missing="the workload sent no request")


@contract("serving.latency_within_slo")
def test_latency_within_slo(serving, declared, vllm_settings, vllm_record, vllm_evidence):
    run = serving.run
    measured = figures.latency(run.target)
    assert measured is not None, "no request of the workload gave a first token (see serving.load_success)"
    line = measured.line()
    direct = figures.latency(run.direct) if run.direct else None
    added = ""
    if direct is not None:
        added = (
            f"; straight to the server: {direct.line()}; the ingress adds "
            f"{(measured.ttft_p50 - direct.ttft_p50) * 1000:.1f} ms to TTFT p50, "
            f"{(measured.ttft_p99 - direct.ttft_p99) * 1000:.1f} ms to p99"
        )
        vllm_record("serving_ingress_added_ttft_p50_seconds", f"{measured.ttft_p50 - direct.ttft_p50:.4f}")
    vllm_record("serving_ttft_p50_seconds", f"{measured.ttft_p50:.4f}")
    vllm_record("serving_ttft_p99_seconds", f"{measured.ttft_p99:.4f}")
    if measured.itl_p99 is not None:
        vllm_record("serving_itl_p99_seconds", f"{measured.itl_p99:.4f}")
    vllm_record("serving_output_tokens_per_second", f"{measured.output_tokens_per_second:.2f}")
    baseline = figures.latency(run.baseline) if run.baseline else None
    compared = f"; baseline, {serving.baseline}: {baseline.line()}" if baseline else ""
    if serving.picture:
        vllm_record("picture", serving.picture)
    compared += f"; the latency picture was not drawn: {serving.picture_not_drawn}" if serving.picture_not_drawn else ""
    # A real load generator's own figures, when the user ran one (--vllm-serving-witness): read, not judged.
    witnessed = f"; {witness.witness_line(vllm_settings.serving_witness)}" if vllm_settings.serving_witness else ""
    vllm_record("figures", line + added + compared + witnessed)
    slo = declared["slo"]
    judged = figures.judge_objectives(measured, slo.value or {})
    if judged.missed and direct is not None:
        within_at_server = not figures.missed_objectives(direct, slo.value or {})
        added += " (the server alone meets the objectives: the ingress is why)" if within_at_server else ""
    assert not judged.missed, f"missed serving.slo ({slo.basis}): {', '.join(judged.missed)}; {line}{added}"
    if judged.unmeasured:
        undecided(f"serving.slo declares what this run could not measure: {'; '.join(judged.unmeasured)}; {line}")
    # No objective declared: the figures are reported, and nothing was judged against them.
    vllm_evidence.judged(judged.judged, "objectives", missing="no latency objective declared")
    vllm_evidence.judged(measured.requests, "requests")


@contract("serving.occupancy")
def test_occupancy(serving, declared, vllm_record, vllm_evidence):
    run = serving.run
    concurrency = declared["concurrency"].value
    # Through an ingress, the rounds straight to the server show its own capacity.
    seen = figures.occupancy(run.direct_gauges or run.gauges)
    vllm_record("figures", seen.line(concurrency))
    assert seen.peak_running is not None, f"cannot judge occupancy: {seen.line(concurrency)}"
    vllm_record("serving_peak_running", f"{seen.peak_running:g}")
    verdict = seen.verdict(concurrency)
    if verdict == "undecided":
        undecided(f"the declared concurrency never reached the server at once: {seen.line(concurrency)}")
    assert verdict == "ran", (
        f"the server queued what it should run: {seen.line(concurrency)} "
        "(is --max-num-seqs, or the KV cache, smaller than the workload needs?)"
    )
    vllm_evidence.judged(seen.samples, "/metrics samples", missing="no /metrics sample during the rounds")


def _values(declared):
    return {key: declared[key].value for key in serving_run.KEYS}


def _client_kept_time(run, vllm_record, line):
    if (lag := figures.client_lag(run)) is not None:
        vllm_record("serving_client_lag_ms", f"{lag * 1000:.1f}")
    if why := figures.client_too_late(run):
        undecided(f"{why}; {line}")


def _comparable(serving):
    if serving.unusable:
        pytest.fail(f"the baseline cannot be compared with: {serving.unusable}", pytrace=False)


@contract("serving.throughput_not_worse")
def test_throughput_not_worse(serving, declared, vllm_record, vllm_evidence):
    _comparable(serving)
    run = serving.run
    compared = figures.throughput(run, serving_run.design(_values(declared)))
    rounds = ", ".join(
        f"{a.output_tokens_per_second:.1f}/{b.output_tokens_per_second:.1f}"
        for a, b in zip(run.target, run.baseline, strict=False)
    )
    vllm_record("serving_round_pairs", str(compared.pairs))
    if compared.pairs < MIN_PAIRS:
        undecided(
            f"{compared.pairs} round pair(s) in which at least half the requests completed on both sides, "
            f"{MIN_PAIRS} decide (see serving.load_success)"
        )
    vllm_record("serving_throughput_ratio", f"{compared.ratio:.3f}")
    vllm_record("serving_throughput_ratio_interval", "{:.3f}..{:.3f}".format(*compared.interval))
    seconds = sum(r.seconds for r in run.target)
    vllm_record("serving_load_seconds", f"{seconds:.1f}")
    line = (
        f"{compared.describe()}; {seconds:.1f} s of load on the target; output tokens/s per round, "
        f"target/baseline: {rounds}; against {serving.baseline}"
    )
    vllm_record("figures", line)
    if serving.too_few_rounds:
        undecided(f"{serving.too_few_rounds}: {line}")
    _client_kept_time(run, vllm_record, line)
    if compared.verdict == "undecided":
        undecided(f"the interval holds the boundary after every look the load budget allowed: {line}")
    assert compared.verdict == "not worse", f"the target is slower than the baseline: {line}"
    vllm_evidence.judged(compared.pairs, "round pairs")


@contract("serving.latency_not_worse")
def test_latency_not_worse(serving, declared, vllm_record, vllm_evidence):
    _comparable(serving)
    per_token, first_token = figures.latencies(serving.run, serving_run.design(_values(declared)))
    lines = f"{per_token.describe()}; {first_token.describe()}"
    vllm_record("figures", f"{lines}; against {serving.baseline}")
    _client_kept_time(serving.run, vllm_record, lines)
    worse = [c.describe() for c in (per_token, first_token) if c.verdict == "worse"]
    assert not worse, f"the target keeps callers waiting longer than the baseline: {'; '.join(worse)}"
    if serving.too_few_rounds:
        undecided(f"{serving.too_few_rounds}: {lines}")
    # Time to first token at a closed loop's concurrency is mostly queueing, a round's median too noisy to
    # clear the boundary in a minute (spread 0.26 a pair): it fails when clearly worse, and decides nothing else.
    if per_token.verdict != "not worse":
        undecided(f"the interval of time per output token holds the boundary: {lines}")
    vllm_evidence.judged(per_token.pairs, "round pairs")


@contract("serving.progress_while_healthy")
def test_progress_while_healthy(
    declared, vllm_facts, vllm_client, vllm_expect, vllm_exclusive, vllm_record, vllm_evidence
):
    # Its own one-request workload, not the measured run's: a hung engine must not hang the measurement first.
    values = _values(declared)
    try:
        workload = serving_run.plan(vllm_client, vllm_facts, values, vllm_expect)
    except measured_rounds.NoPrompt as exc:
        pytest.fail(f"the workload cannot be built: {exc}", pytrace=False)
    within = declared["progress_within_seconds"]
    with vllm_exclusive():
        seen = measured_rounds.progress_while_healthy(
            vllm_client, vllm_expect.release.health_path, workload, within.value
        )
    if seen.health_status != 200:
        undecided(f"/health answered {seen.health_status}, so the server does not claim health")
    assert seen.first_token_seconds is not None, (
        f"/health answered 200, but a request got no first token within {within}: {seen.detail} "
        "(a hung engine behind a healthy API server)"
    )
    vllm_record("figures", f"/health 200, first token after {seen.first_token_seconds:.3f} s")
    vllm_evidence.judged(1, "requests")


@contract("serving.capacity_not_worse")
def test_capacity_not_worse(
    declared,
    vllm_settings,
    vllm_client,
    vllm_ingress_client,
    vllm_facts,
    vllm_expect,
    vllm_exclusive,
    vllm_record,
    vllm_evidence,
    vllm_progress,
):
    goodput, budget = (vllm_expect.declared("serving", key) for key in ("goodput", "capacity_seconds"))
    values, objective = _values(declared), open_loop.Goodput.of(goodput.value)
    with vllm_exclusive():
        try:
            found = capacity_run.measure(
                values,
                objective,
                budget.value,
                settings=vllm_settings,
                facts=vllm_facts,
                expect=vllm_expect,
                client=vllm_client,
                ingress_client=vllm_ingress_client,
                progress=vllm_progress.phase("the capacity search"),
            )
        except measured_rounds.NoPrompt as exc:
            pytest.fail(f"the workload cannot be built: {exc}", pytrace=False)
    if found.unusable:
        pytest.fail(f"the baseline cannot be compared with: {found.unusable}", pytrace=False)
    vllm_record("figures", f"{found.line()}; objective: {objective.describe()}")
    if found.picture:
        vllm_record("picture", found.picture)
    if found.search is None:
        undecided(f"no capacity searched: {found.cannot}")
    compared = found.search.ratio
    vllm_record("serving_capacity_ratio_interval", f"{compared.low:.3f}..{compared.high:.3f}")
    if compared.verdict == "undecided":
        behind = f" (the client, not the server, set the pace: {found.search.client_bound})"
        undecided(
            f"the capacity ratio's interval straddles its boundary{behind if found.search.client_bound else ''}: "
            f"{found.line()}"
        )
    assert compared.verdict == "not worse", (
        f"the target keeps up with fewer requests a second than the baseline, past max_slowdown "
        f"{declared['max_slowdown']}: {found.line()}"
    )
    vllm_evidence.judged(sum(len(trials) for trials in found.trials.values()), "trials")
