"""SIGTERM with streams in flight and requests arriving, on a server the plugin owns: measured, then judged.

What a rolling upgrade does to an old replica: its main process gets
SIGTERM (a container runtime signals that one process) while streams are
in flight and callers keep sending. ``measure`` times a short completion to
size the streams, opens ``STREAMS`` streamed completions (``ignore_eos``,
usage included) and waits for each one's first chunk, sends SIGTERM, and
then, until the process is gone or the deadline passes: sends a new
one-token completion every ``KNOCK_EVERY`` seconds, asks ``/health`` every
``HEALTH_EVERY`` seconds, and watches the process and its group. Each
stream's whole body is kept (never sent again: a cut stream is a cut
stream). The judges below read the record: whole streams within the
promised drain, new requests refused (a retryable status, or the
connection refused or closed) rather than hung or served, ``/health`` no
longer 200, and the process gone within the drain plus a margin.

The streams are sized to end about a third of the drain after the signal
(2 to 4 s), so a server that drains finishes them well inside its promise
and one that aborts still has them in flight when the signal lands.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from pytest_vllm_conformance.catalogue.expectations import Expectations
from pytest_vllm_conformance.connection.client import AsyncBoundedClient, OpenStream, RequestTimeout, TransportFailure
from pytest_vllm_conformance.connection.discovery import ServerFacts
from pytest_vllm_conformance.protocol import sse

STREAMS = 2
KNOCK_EVERY = 0.5
HEALTH_EVERY = 0.25
# How long each stream should still run after the signal, in seconds: a third of the drain, within these bounds.
STREAM_SECONDS = (2.0, 4.0)
# Watched a moment past the drain and its margin, so that the exit is judged at its deadline.
WATCH_PAST_DEADLINE = 1.0
# Statuses that say the request was not taken, to be sent elsewhere (RFC 9110's 503 Service Unavailable, and the
# gateway and rate statuses proxies and the OpenAI SDK retry). Not 500: an internal error, counted against error
# budgets and not retried by nginx's default proxy_next_upstream; vLLM 0.32 answers it while draining, from an
# unhandled RuntimeError ("cannot schedule new futures after shutdown").
RETRYABLE = frozenset({408, 429, 502, 503, 504})
PROBE_TOKENS = 32
# The profile's lifecycle keys the drain reads (declarations.yaml gives each one's default).
KEYS = ("drain_seconds", "exit_margin_seconds", "refusal_seconds", "signal_grace_seconds")
NOT_OWNED = (
    "this process owns no server to stop: under pytest-xdist the controlling process started it, and the other "
    "workers may still need it; run the lifecycle suite without -n (pytest suites --vllm-serve=... -m lifecycle)"
)
NONE_IN_FLIGHT = "no stream was still in flight when SIGTERM was sent (each had ended already): nothing to drain"


class Owned(Protocol):
    """The server process the plugin started: what the drain needs of it (``VllmServer`` is one)."""

    def terminate_main(self) -> None: ...

    def exit_code(self) -> int | None: ...

    def tree_alive(self) -> bool: ...


@dataclass(frozen=True)
class Plan:
    model: str
    drain_seconds: float  # what the deployment promises; 0: the release aborts what is in flight
    exit_margin_seconds: float  # teardown allowed past the drain
    refusal_seconds: float  # a request sent while draining is refused, or its connection closed, within this
    # What is sent this soon after the signal races its delivery: requests and probes are judged from then on.
    signal_grace_seconds: float
    max_model_len: int | None = None
    prompt: str = "Hello"

    @property
    def deadline(self) -> float:
        return self.drain_seconds + self.exit_margin_seconds


@dataclass
class InFlight:
    stream: OpenStream
    asked_tokens: int
    # Still open when the watch ended: the drain hung up on it (the server had neither finished nor closed it).
    left_open: bool = False


@dataclass(frozen=True)
class Knock:
    """A request sent after the signal: its answer's status, or how no answer came."""

    sent: float  # seconds after the signal
    seconds: float  # until its answer, or its failure
    status: int | None = None
    failure: str | None = None
    hung: bool = False


@dataclass(frozen=True)
class Probe:
    sent: float  # seconds after the signal
    status: int | None
    failure: str | None = None


@dataclass
class Drain:
    plan: Plan
    tokens_per_second: float
    signalled: float = 0.0  # perf_counter() when SIGTERM was sent
    streams: list[InFlight] = field(default_factory=list)
    knocks: list[Knock] = field(default_factory=list)
    health: list[Probe] = field(default_factory=list)
    exited_after: float | None = None  # seconds from the signal to the main process's exit
    exit_code: int | None = None
    tree_gone_after: float | None = None  # ... to the whole process group's
    watched_seconds: float = 0.0

    def in_flight(self) -> list[InFlight]:
        """The streams still running when the signal was sent: the ones the drain is judged on."""
        return [s for s in self.streams if s.stream.status == 200 and s.stream.running_at(self.signalled)]

    def summary(self) -> str:
        exited = f"exited after {self.exited_after:.1f} s" if self.exited_after is not None else "had not exited"
        return (
            f"SIGTERM with {len(self.in_flight())} of {len(self.streams)} streams in flight; "
            f"{len(self.knocks)} new requests and {len(self.health)} /health probes after it; the server {exited} "
            f"(watched {self.watched_seconds:.1f} s)"
        )


def plan_for(expect: Expectations, facts: ServerFacts) -> Plan:
    """The drain the profile declares (else the release's default), for the served model."""

    def value(key: str) -> float:
        return float(expect.declared("lifecycle", key).value)

    return Plan(
        model=facts.model,
        drain_seconds=value("drain_seconds"),
        exit_margin_seconds=value("exit_margin_seconds"),
        refusal_seconds=value("refusal_seconds"),
        signal_grace_seconds=value("signal_grace_seconds"),
        max_model_len=facts.max_model_len if isinstance(facts.max_model_len, int) else None,
    )


def stream_tokens(plan: Plan, tokens_per_second: float) -> int:
    """Tokens each stream asks for: running about a third of the drain past the signal, within the context."""
    low, high = STREAM_SECONDS
    seconds = min(max(plan.drain_seconds / 3, low), high)
    # A batch of two decodes about as fast as one request: each stream at the measured rate.
    tokens = int(tokens_per_second * seconds)
    room = (plan.max_model_len or 2048) - 16  # the prompt is a word or two
    return max(16, min(tokens, room))


def _completion(plan: Plan, tokens: int, stream: bool) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": plan.model,
        "prompt": plan.prompt,
        "max_tokens": tokens,
        "temperature": 0,
        "ignore_eos": True,
    }
    if stream:
        body.update(stream=True, stream_options={"include_usage": True})
    return body


async def _rate(client: AsyncBoundedClient, plan: Plan) -> float:
    """Tokens a second one request decodes (prefill included, so the streams come out a little short)."""
    started = time.perf_counter()
    response = await client.post("/v1/completions", _completion(plan, PROBE_TOKENS, stream=False))
    elapsed = time.perf_counter() - started
    if response.status != 200:
        raise DrainNotMeasured(f"the sizing request was not served: {response.describe()}")
    return PROBE_TOKENS / max(elapsed, 1e-3)


class DrainNotMeasured(Exception):
    """The measurement could not start (no stream opened, the sizing request refused)."""


async def measure(
    client: AsyncBoundedClient, server: Owned, plan: Plan, progress: Callable[[str], None] | None = None
) -> Drain:
    """Streams in flight, SIGTERM, then new requests, /health and the process watched until it is gone."""
    rate = await _rate(client, plan)
    drain = Drain(plan, rate)
    tokens = stream_tokens(plan, rate)
    body = _completion(plan, tokens, stream=True)
    opened = await asyncio.gather(
        *(client.open_stream("POST", "/v1/completions", json_body=body, keep=True) for _ in range(STREAMS)),
        return_exceptions=True,
    )
    drain.streams = [InFlight(s, tokens) for s in opened if isinstance(s, OpenStream)]
    failed = [s for s in opened if not isinstance(s, OpenStream)]
    if failed:
        await _close(drain)
        raise DrainNotMeasured(f"{len(failed)} of {STREAMS} streams did not open: {failed[0]}")
    drain.signalled = time.perf_counter()
    server.terminate_main()
    if progress is not None:
        progress(f"SIGTERM sent, {len(drain.in_flight())} streams in flight; watching the server go")
    until = drain.signalled + plan.deadline + WATCH_PAST_DEADLINE
    gone = asyncio.Event()
    try:
        await asyncio.gather(
            _watch(drain, server, until, gone),
            _knock(client, drain, until, gone),
            _probe_health(client, drain, until, gone),
            _streams_end(drain, until),
        )
    finally:
        await _close(drain)
    return drain


async def _close(drain: Drain) -> None:
    for inflight in drain.streams:
        inflight.left_open = inflight.stream.ended_at is None
        await inflight.stream.close()


def _since(drain: Drain) -> float:
    return time.perf_counter() - drain.signalled


async def _watch(drain: Drain, server: Owned, until: float, gone: asyncio.Event) -> None:
    while time.perf_counter() < until:
        if drain.exited_after is None:
            code = server.exit_code()
            if code is not None:
                drain.exited_after, drain.exit_code = _since(drain), code
        if drain.exited_after is not None and not server.tree_alive():
            drain.tree_gone_after = _since(drain)
            gone.set()
            break
        await asyncio.sleep(0.05)
    drain.watched_seconds = _since(drain)


async def _knock(client: AsyncBoundedClient, drain: Drain, until: float, gone: asyncio.Event) -> None:
    body = _completion(drain.plan, 1, stream=False)
    while _going_on(drain, until, gone):
        sent = _since(drain)
        try:
            response = await client.post("/v1/completions", body, timeout=drain.plan.refusal_seconds)
        except RequestTimeout as exc:
            drain.knocks.append(Knock(sent, _since(drain) - sent, failure=str(exc), hung=True))
        except TransportFailure as exc:
            drain.knocks.append(Knock(sent, _since(drain) - sent, failure=str(exc)))
        else:
            said = response.text[:80].strip() if response.status >= 400 else None
            drain.knocks.append(Knock(sent, _since(drain) - sent, status=response.status, failure=said))
        await _pause(KNOCK_EVERY, gone)


async def _probe_health(client: AsyncBoundedClient, drain: Drain, until: float, gone: asyncio.Event) -> None:
    while _going_on(drain, until, gone):
        sent = _since(drain)
        try:
            response = await client.get("/health", timeout=2.0)
        except TransportFailure as exc:
            drain.health.append(Probe(sent, None, str(exc)))
        else:
            drain.health.append(Probe(sent, response.status))
        await _pause(HEALTH_EVERY, gone)


def _going_on(drain: Drain, until: float, gone: asyncio.Event) -> bool:
    """Until the deadline, or the server is gone and the grace past by two requests' time (what is judged is sent
    after the grace: a server gone at once is still seen refusing)."""
    if time.perf_counter() >= until:
        return False
    return not gone.is_set() or _since(drain) <= drain.plan.signal_grace_seconds + 2 * KNOCK_EVERY


async def _pause(seconds: float, gone: asyncio.Event) -> None:
    if gone.is_set():
        await asyncio.sleep(seconds)
        return
    try:
        await asyncio.wait_for(gone.wait(), seconds)
    except TimeoutError:
        pass


async def _streams_end(drain: Drain, until: float) -> None:
    while time.perf_counter() < until and any(s.stream.ended_at is None for s in drain.streams):
        await asyncio.sleep(0.05)


# The judges: each returns what broke the contract, one line per offence (none: kept).


@dataclass(frozen=True)
class StreamEnd:
    after: float | None  # seconds from the signal to the stream's end (None: still open when the watch ended)
    finish_reasons: tuple[str, ...]
    completion_tokens: int | None
    problem: str | None  # why it is not whole; None: whole

    @property
    def whole(self) -> bool:
        return self.problem is None


def stream_end(drain: Drain, inflight: InFlight) -> StreamEnd:
    """How one in-flight stream ended: whole (every event, a finish_reason, the tokens asked, [DONE]) or not."""
    stream = inflight.stream
    after = stream.ended_at - drain.signalled if stream.ended_at is not None else None
    parsed = sse.parse(stream.body)
    reasons = tuple(
        str(choice.get("finish_reason"))
        for event in parsed.chunks()
        for choice in event.choices()
        if choice.get("finish_reason")
    )
    usage = [event.payload.get("usage") for event in parsed.chunks() if isinstance(event.payload.get("usage"), dict)]
    tokens = usage[-1].get("completion_tokens") if usage else None
    errors = [event.payload["error"] for event in parsed.chunks() if "error" in event.payload]
    problem = None
    if after is None or inflight.left_open:
        last = stream.last_chunk_at
        since = f" (its last byte at {last - drain.signalled:.1f} s)" if last is not None else ""
        problem = f"neither finished nor closed{since}"
        after = None
    elif stream.broken:
        problem = f"cut: {stream.broken}"
    elif errors:
        problem = f"an error event: {str(errors[0])[:160]}"
    elif parsed.problems:
        problem = f"ended without its close ({parsed.problems[0]})"
    elif reasons != ("length",):
        problem = f"finish_reason {', '.join(reasons) or 'none'} (asked {inflight.asked_tokens} tokens, ignore_eos)"
    elif tokens != inflight.asked_tokens:
        problem = f"{tokens} of the {inflight.asked_tokens} tokens asked"
    return StreamEnd(after, reasons, tokens if isinstance(tokens, int) else None, problem)


def in_flight_problems(drain: Drain) -> list[str]:
    """Drain N > 0: each in-flight stream whole within N s. N = 0 (abort): each one ended within the margin."""
    plan = drain.plan
    problems = []
    for number, inflight in enumerate(drain.in_flight(), 1):
        end = stream_end(drain, inflight)
        if end.after is None:
            problems.append(f"stream {number}: still open {drain.watched_seconds:.1f} s after SIGTERM, {end.problem}")
        elif plan.drain_seconds > 0 and not end.whole:
            problems.append(f"stream {number} ended {end.after:.1f} s after SIGTERM, not whole: {end.problem}")
        elif plan.drain_seconds > 0 and end.after > plan.drain_seconds:
            problems.append(
                f"stream {number} ended whole only {end.after:.1f} s after SIGTERM, past the drain of "
                f"{plan.drain_seconds:g} s"
            )
        elif plan.drain_seconds == 0 and end.after > plan.exit_margin_seconds:
            problems.append(f"stream {number} ended only {end.after:.1f} s after SIGTERM: left hanging by an abort")
    return problems


def aborted(drain: Drain) -> int:
    """How many in-flight streams did not end whole (the release's abort, when no drain is promised)."""
    return sum(not stream_end(drain, inflight).whole for inflight in drain.in_flight())


def _promise(expect: Expectations) -> str:
    declared = expect.declared("lifecycle", "drain_seconds")
    modes = expect.release.shutdown_modes
    return (
        f"lifecycle.drain_seconds is {declared.value:g} ({declared.basis}); {expect.version_label} drains only with "
        f"{modes['flag']} N > 0 ({modes['flag']} {modes['default_seconds']}, its default, {modes['default_mode']}s: "
        f"{modes['abort_effect']})"
    )


def say(problems: list[str], plan: Plan, expect: Expectations) -> str:
    """The in-flight failure: each stream's end, what was promised, and the flag that keeps the promise."""
    return f"{len(problems)} stream(s) in flight at SIGTERM: " + "; ".join(problems) + f". {_promise(expect)}"


def abort_note(drain: Drain, expect: Expectations) -> str:
    """What an undeclared drain reports: the release's default, and the flag (and key) that change it."""
    modes = expect.release.shutdown_modes
    return (
        f"{aborted(drain)} of {len(drain.in_flight())} streams in flight did not finish, as {expect.version_label}'s "
        f"default ({modes['flag']} {modes['default_seconds']}) has it; start the server with {modes['flag']} N and "
        "declare lifecycle.drain_seconds: N to let them finish"
    )


def knock_problems(drain: Drain) -> list[str]:
    """Each request sent after the signal refused with a retryable status or at the connection, never hung or
    served (a server going away must not take new work)."""
    problems = []
    for knock in judged_knocks(drain):
        when = f"sent {knock.sent:.1f} s after SIGTERM"
        if knock.hung:
            problems.append(f"{when}: no answer within {drain.plan.refusal_seconds:g} s (hung)")
        elif knock.status is not None and knock.status not in RETRYABLE:
            said = f" ({knock.failure})" if knock.failure else ""
            problems.append(f"{when}: answered {knock.status}{said}, not a refusal to send elsewhere (503)")
    return problems


def judged_knocks(drain: Drain) -> list[Knock]:
    """The requests sent after the signal's grace: one sent with the signal races its delivery."""
    return [knock for knock in drain.knocks if knock.sent > drain.plan.signal_grace_seconds]


def health_problems(drain: Drain) -> list[str]:
    grace = drain.plan.signal_grace_seconds
    late = [probe for probe in drain.health if probe.status == 200 and probe.sent > grace]
    if not late:
        return []
    return [
        f"/health answered 200 {len(late)} time(s) from {late[0].sent:.1f} to {late[-1].sent:.1f} s after SIGTERM "
        "(a load balancer polling it keeps sending work to a server going away)"
    ]


def exit_problem(drain: Drain) -> str | None:
    deadline = drain.plan.deadline
    gone = drain.tree_gone_after
    if gone is not None and gone <= deadline:
        return None
    said = (
        f"its process group was gone only {gone:.1f} s after SIGTERM"
        if gone is not None
        else f"it was still running {drain.watched_seconds:.1f} s after SIGTERM"
        if drain.exited_after is None
        else f"its main process exited after {drain.exited_after:.1f} s, but its group still ran at "
        f"{drain.watched_seconds:.1f} s"
    )
    return (
        f"the server should be gone within the drain of {drain.plan.drain_seconds:g} s and a margin of "
        f"{drain.plan.exit_margin_seconds:g} s; {said}"
    )


def outcomes(drain: Drain) -> str:
    """What the new requests got, in one line: ``503 x4, connection refused x2``."""
    keys = [
        str(knock.status) if knock.status is not None else ("hung" if knock.hung else _failure(knock.failure))
        for knock in drain.knocks
    ]
    return _tally(keys) or "none sent"


def health_outcomes(drain: Drain) -> str:
    """What /health answered after the signal: ``200 x3 until 2.5 s, connection refused x1``."""
    keys = [str(probe.status) if probe.status is not None else _failure(probe.failure) for probe in drain.health]
    ok = [probe.sent for probe in drain.health if probe.status == 200]
    until = f" (200 until {ok[-1]:.1f} s after SIGTERM)" if ok else ""
    return (_tally(keys) or "no probe") + until


def _tally(keys: list[str]) -> str:
    seen: dict[str, int] = {}
    for key in keys:
        seen[key] = seen.get(key, 0) + 1
    return ", ".join(f"{key} x{count}" for key, count in seen.items())


def _failure(text: str | None) -> str:
    lowered = (text or "").lower()
    if "refused" in lowered or "connecterror" in lowered:
        return "connection refused"
    if "disconnect" in lowered or "closed" in lowered or "reset" in lowered:
        return "connection closed"
    return "no answer"
