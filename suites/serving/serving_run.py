"""The serving run the suite shares: the workload, the baseline the options name, the measurement, the saving.

The baseline is ``--vllm-baseline-url`` (rounds interleaved in this run)
or, without one, ``--vllm-perf-baseline-file`` (rounds saved by an earlier
run with ``--vllm-perf-save``). A baseline that cannot be compared with is
kept as its reason, so the throughput contract fails with it while the
target's own contracts are still judged.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pytest_vllm_conformance.catalogue.expectations import Expectations
from pytest_vllm_conformance.connection.client import BoundedClient
from pytest_vllm_conformance.connection.discovery import ServerFacts
from pytest_vllm_conformance.connection.live_baseline import BaselineUnusable, LiveBaseline, connect_baseline
from pytest_vllm_conformance.connection.settings import Settings

from . import figures, picture, rounds, same_server
from .loadgen import ClosedLoop, LoadGenerator, Workload
from .saved_rounds import (
    MIN_ROUNDS,
    PerfFileError,
    PerfRecording,
    recording,
    refusal,
)
from .stats import Design

# The profile's serving keys (catalogue defaults for all but concurrency).
KEYS = (
    "concurrency",
    "prompt_tokens",
    "output_tokens",
    "requests",
    "warm_up_requests",
    "rounds",
    "looks",
    "load_seconds",
    "max_slowdown",
    "confidence",
    "slo",
    "progress_within_seconds",
)
WORKLOAD = ("prompt_tokens", "output_tokens", "concurrency", "requests")


@dataclass
class Served:
    run: rounds.ServingRun
    workload: Workload
    baseline: str = ""  # what the target was compared with, for the figures
    unusable: str | None = None  # why the baseline named cannot be compared with
    too_few_rounds: str | None = None  # why a saved baseline's comparison cannot decide
    saved_to: str | None = None
    picture: str | None = None  # the latency picture's file name, beside the report
    picture_not_drawn: str | None = None  # why a report has no picture


def design(values: dict[str, Any]) -> Design:
    """How the comparisons with the baseline decide (stats.py): the declared loss, error, and looks."""
    return Design(values["max_slowdown"], values["confidence"], values["rounds"], values["looks"])


def enough(values: dict[str, Any]) -> Callable[[rounds.ServingRun], bool]:
    """When a run with a live baseline has measured enough: at a look where throughput and time per output token
    both decide,
    after the planned looks, or once either side has been loaded for ``load_seconds``."""
    planned = design(values)

    def decided(run: rounds.ServingRun) -> bool:
        pairs = min(len(run.target), len(run.baseline))
        if pairs >= planned.max_pairs:
            return True
        if planned.is_look(pairs) and all(
            compared.verdict != "undecided"
            for compared in (figures.throughput(run, planned), figures.latencies(run, planned)[0])
        ):
            return True
        spent = max(sum(r.seconds for r in run.target), sum(r.seconds for r in run.baseline))
        return spent >= values["load_seconds"]

    return decided


def open_baseline(settings: Settings, facts: ServerFacts) -> LiveBaseline | PerfRecording | str | None:
    """The live baseline, else the saved one, else None; a string says why the one named is unusable."""
    try:
        if settings.baseline_url:
            return connect_baseline(settings, facts)
        if settings.perf_baseline_file:
            return PerfRecording.load(settings.perf_baseline_file)
    except BaselineUnusable as exc:
        return str(exc)
    except PerfFileError as exc:
        return f"--vllm-perf-baseline-file {exc}"
    return None


def live_refusal(
    live: LiveBaseline,
    settings: Settings,
    facts: ServerFacts,
    client: BoundedClient,
    workload: Workload,
    expect: Expectations,
) -> str | None:
    """Why a live baseline cannot be compared with, as a saved one of the same kind would not be; None when it can."""
    served = live.facts.model
    if served != facts.model and settings.baseline_model != served:
        # As for a saving (baseline_file.refusal): another model's throughput measures something else.
        return (
            f"--vllm-baseline-url serves model {served!r}, the target serves {facts.model!r}; "
            f"to compare them anyway, pass --vllm-baseline-model={served}"
        )
    if settings.baseline_is_target:
        return None
    assert settings.baseline_url is not None, "a live baseline has a URL"
    itself = same_server.same_url(settings.baseline_url, facts.url) or same_server.same_server(
        client,
        live.client,
        workload,
        metrics_path=expect.release.metrics_path,
        counter=expect.fact("finished_request_counter"),
    )
    if itself:
        return (
            "--vllm-baseline-url is the target itself (the same URL, or the same server counting the target's "
            "requests as its own): a server compared with itself passes whatever it is; "
            "pass --vllm-baseline-is-target if that is meant"
        )
    return None


def plan(client: BoundedClient, facts: ServerFacts, values: dict[str, Any], expect: Expectations) -> Workload:
    """The declared workload on this server (raises rounds.NoPrompt when no prompt can be built, or none fits)."""
    context = facts.max_model_len
    needed = values["prompt_tokens"] + values["output_tokens"]
    if context is not None and needed > context:
        # Sent anyway, every request would be refused, and the server blamed for the profile's numbers.
        raise rounds.NoPrompt(
            f"serving.prompt_tokens {values['prompt_tokens']} and output_tokens {values['output_tokens']} need "
            f"{needed} tokens of context, and {facts.url} serves {facts.model} with max_model_len {context} "
            "(its /v1/models): lower them in the profile"
        )
    return rounds.plan(
        client,
        facts.model,
        request=expect.fact("serving_request"),
        seed=expect.fact("serving_prompt_seed"),
        **{key: values[key] for key in WORKLOAD},
    )


def serve(
    values: dict[str, Any],
    *,
    settings: Settings,
    facts: ServerFacts,
    expect: Expectations,
    client: BoundedClient,
    ingress_client: BoundedClient,
    generator: LoadGenerator | None = None,
    progress: Callable[[str], None] | None = None,
) -> Served:
    """Plan, measure and (with --vllm-perf-save) save the run. Raises rounds.NoPrompt when no prompt can be built."""
    baseline = open_baseline(settings, facts)
    target_workload = plan(client, facts, values, expect)
    if isinstance(baseline, LiveBaseline):
        refused = live_refusal(baseline, settings, facts, client, target_workload, expect)
        if refused:
            baseline.client.close()
            baseline = refused
    live = baseline if isinstance(baseline, LiveBaseline) else None

    run = rounds.measure(
        generator or ClosedLoop(),
        target=ingress_client,
        target_workload=target_workload,
        server=client,
        baseline=live.client if live else None,
        baseline_workload=plan(live.client, live.facts, values, expect) if live else None,
        direct=client if ingress_client is not client else None,
        rounds=values["rounds"],
        warm_up_requests=values["warm_up_requests"],
        metrics_path=expect.release.metrics_path,
        gauge_names=expect.fact("serving_gauges"),
        enough=enough(values) if live else None,
        progress=progress,
    )
    served = Served(run, target_workload, unusable=baseline if isinstance(baseline, str) else None)
    workload = {key: values[key] for key in WORKLOAD}
    if live:
        served.baseline = f"{settings.baseline_url} (interleaved in this run)"
    elif isinstance(baseline, PerfRecording):
        served.unusable = refusal(baseline, facts.model, workload, settings.baseline_model)
        if served.unusable:
            served.unusable = f"--vllm-perf-baseline-file {served.unusable}"
        else:
            run.baseline = list(baseline.rounds)
            served.baseline = f"the saved run {baseline.label}"
            fewest = min(len(run.target), len(run.baseline))
            if fewest < MIN_ROUNDS:
                served.too_few_rounds = (
                    f"{fewest} round(s) to pair with a saved run, which was not interleaved with this one: "
                    f"at least {MIN_ROUNDS} tell a slower server from a slower moment of the machine"
                )
    if settings.report:
        path = picture.picture_path(settings.report, "latency")
        served.picture_not_drawn = picture.draw(path, run.target, run.baseline, served.baseline)
        served.picture = path.name if served.picture_not_drawn is None else None
    if settings.perf_save:
        saving = recording(run.target, version=facts.version, model=facts.model, url=facts.url, workload=workload)
        served.saved_to = str(saving.save(settings.perf_save))
    return served
