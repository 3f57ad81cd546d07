"""Differences between a captured baseline and a target's observation.

Data in, data out: no HTTP and no pytest. ``differences`` compares two
``observed:`` sections (written by ``capture.py``) and returns one
``Difference`` per change. A difference either matters for serving (the
``profile_diff`` suite fails it: max_model_len, a route or model removed,
the auth posture, the scale-out state, the tokenizer, a conversation
rendered otherwise) or is informational
(reported and passing: the vLLM version, routes, models or metric names
added, ...). What either side could not observe is never taken as
unchanged: it is a failing difference naming what was not seen and how to
make it visible, unless the profile lists it under ``profile_diff.ignore``.
``diff_report.py`` writes the same list for people.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pytest_vllm_conformance.catalogue.cases import CaseContext, NoCases
from pytest_vllm_conformance.observed.rendering_drift import changes as rendering_changes

Observed = Mapping[str, Any]


@dataclass(frozen=True)
class Difference:
    id: str  # also the test id: "max_model_len: 2048 -> 512"
    aspect: str
    before: Any
    after: Any
    matters: bool
    why: str
    undecided: bool = False  # neither side's value could be compared with the other's

    def __str__(self) -> str:
        return self.id

    @property
    def verdict(self) -> str:
        return "undecided" if self.undecided else "fails" if self.matters else "informational"

    @property
    def message(self) -> str:
        return f"{self.id}: {self.why}"


# The one "difference" of two observations that agree: its test passes and says so.
NO_DIFFERENCE = Difference("no difference", "all", None, None, False, "the target's observation matches the baseline's")


def _serving(id: str, aspect: str, before: Any, after: Any, why: str) -> Difference:
    return Difference(id, aspect, before, after, True, why)


def _info(id: str, aspect: str, before: Any, after: Any, why: str) -> Difference:
    return Difference(id, aspect, before, after, False, why)


def _section(observed: Observed, key: str) -> Mapping[str, Any]:
    value = observed.get(key)
    return value if isinstance(value, Mapping) else {}


def _changed(
    before: Observed, after: Observed, key: str, aspect: str, id: str, why: str, *, matters: bool = False
) -> Iterator[Difference]:
    """The one difference of ``key`` when the two sides hold other values; ``{old}`` and ``{new}`` in ``id``
    stand for them ("auth posture: {old} -> {new}")."""
    old, new = before.get(key), after.get(key)
    if old != new:
        yield Difference(id.replace("{old}", f"{old}").replace("{new}", f"{new}"), aspect, old, new, matters, why)


def _version(baseline: Observed, target: Observed) -> Iterator[Difference]:
    yield from _changed(
        baseline,
        target,
        "vllm_version",
        "vllm_version",
        "vLLM version: {old} -> {new}",
        "a new version alone is not a serving difference; what it changes is listed one by one",
    )


def _models(baseline: Observed, target: Observed) -> Iterator[Difference]:
    before = {card["id"]: card for card in baseline.get("models") or []}
    after = {card["id"]: card for card in target.get("models") or []}
    for model in sorted(set(before) - set(after)):
        yield _serving(f"model removed: {model}", "models", model, None, "clients asking for this model id get 404")
    for model in sorted(set(after) - set(before)):
        yield _info(f"model added: {model}", "models", None, model, "a new model id breaks no client")
    common = sorted(set(before) & set(after))
    for model in common:
        old, new = before[model].get("max_model_len"), after[model].get("max_model_len")
        if old != new:
            name = "max_model_len" if len(common) == 1 else f"max_model_len of {model}"
            why = (
                "prompts that fitted before are now refused or get their max_tokens clamped"
                if isinstance(old, int) and isinstance(new, int) and new < old
                else "the context window changed: requests, memory per request and the KV cache budget change with it"
            )
            yield _serving(f"{name}: {old} -> {new}", "max_model_len", old, new, why)
        old_root, new_root = before[model].get("root"), after[model].get("root")
        if old_root != new_root:
            yield _info(
                f"checkpoint path of {model}: {old_root} -> {new_root}",
                "checkpoint",
                old_root,
                new_root,
                "another path may hold the same weights; the tokenizer fingerprint says more",
            )


def _routes(baseline: Observed, target: Observed) -> Iterator[Difference]:
    before, after = set(baseline.get("routes") or []), set(target.get("routes") or [])
    unknown = set(target.get("routes_unknown") or [])
    for route in sorted(before - after):
        if route in unknown:
            yield _serving(
                f"route not compared: {route}",
                "routes",
                route,
                "probe refused",
                (
                    f"whether the target still serves {route} could not be seen: its probe was refused before "
                    f"vLLM's router. {HOW_TO_SEE['routes']}, or list routes under profile_diff.ignore"
                ),
            )
        else:
            yield _serving(
                f"route removed: {route}", "routes", route, None, "clients calling this route now get 404 or 405"
            )
    for route in sorted(after - before):
        yield _info(
            f"route added: {route}",
            "routes",
            None,
            route,
            "a new route breaks no client (the auth suite checks who may call it)",
        )


def _auth(baseline: Observed, target: Observed) -> Iterator[Difference]:
    yield from _changed(
        _section(baseline, "auth"),
        _section(target, "auth"),
        "posture",
        "auth",
        "auth posture: {old} -> {new}",
        "/v1 answers without a key on one server and not on the other: clients or exposure change",
        matters=True,
    )


def _scale_out(baseline: Observed, target: Observed) -> Iterator[Difference]:
    before, after = _section(baseline, "scale_out"), _section(target, "scale_out")
    if before.get("state") != after.get("state"):
        yield from _changed(
            before,
            after,
            "state",
            "scale_out",
            "scale-out: {old} -> {new}",
            "the render, derender and token-generate routes are served on one server and refused on the other",
            matters=True,
        )
    else:
        yield from _changed(
            before,
            after,
            "status",
            "scale_out",
            f"scale-out answer to {after.get('probe')}: {{old}} -> {{new}}",
            "same state, another status: clients that tell a refusal by its status see a new one",
        )


def _validation(baseline: Observed, target: Observed) -> Iterator[Difference]:
    before, after = _section(baseline, "validation_error"), _section(target, "validation_error")
    if before.get("bounded") is True and after.get("bounded") is False:
        yield _serving(
            "validation errors: bounded -> unbounded",
            "validation_error",
            True,
            False,
            f"{after.get('request')} now lists every error ({after.get('bytes')} bytes): "
            "an error body grows with the request (vLLM 0.29 answered 4 KB with 91 MB)",
        )
    else:
        yield from _changed(
            before,
            after,
            "bounded",
            "validation_error",
            "validation errors bounded: {old} -> {new}",
            "error bodies no longer grow with the request",
        )
    informational = [
        ("status", "validation error status: {old} -> {new}", "clients that branch on the status see a new one"),
        ("bytes", "validation error size: {old} -> {new} bytes", f"the answer to {after.get('request')} changed size"),
    ]
    for key, id, why in informational:
        yield from _changed(before, after, key, "validation_error", id, why)


def _metrics(baseline: Observed, target: Observed) -> Iterator[Difference]:
    old, new = (
        set(_section(baseline, "metrics").get("names") or []),
        set(_section(target, "metrics").get("names") or []),
    )
    for name in sorted(old - new):
        yield _info(f"metric removed: {name}", "metrics", name, None, "dashboards and alerts reading it go blank")
    for name in sorted(new - old):
        yield _info(f"metric added: {name}", "metrics", None, name, "a new metric breaks no dashboard")


def _tokenizer(baseline: Observed, target: Observed) -> Iterator[Difference]:
    before, after = _section(baseline, "tokenizer"), _section(target, "tokenizer")
    if before.get("text") != after.get("text"):
        yield _info(
            "tokenizer probe text changed",
            "tokenizer",
            before.get("text"),
            after.get("text"),
            "the captures tokenized different texts; recapture the baseline to compare tokenizers",
        )
        return
    fingerprints = [
        (
            "sha256",
            "tokenizer fingerprint changed",
            f"the same text gives other token ids ({before.get('token_count')} -> {after.get('token_count')} "
            "tokens): token-id clients, prompt caches and context accounting all shift",
        ),
        (
            "chat_sha256",
            "chat template fingerprint changed",
            "the same messages render to other tokens: the chat template changed",
        ),
    ]
    for key, id, why in fingerprints:
        yield from _changed(before, after, key, "tokenizer", id, why, matters=True)


def _rendering(baseline: Observed, target: Observed) -> Iterator[Difference]:
    for c in rendering_changes(_section(baseline, "rendering"), _section(target, "rendering")):
        yield Difference(c.id, "rendering", c.before, c.after, c.matters, c.why, c.undecided)


def _generation_defaults(baseline: Observed, target: Observed) -> Iterator[Difference]:
    before, after = _section(baseline, "generation_defaults"), _section(target, "generation_defaults")
    why = (
        "a request that sets no {what} gets another value: clients that rely on the default now generate "
        "differently (--generation-config, --override-generation-config or the model's generation_config.json)"
    )
    compared = [("greedy", "temperature (greedy)"), ("completions_max_tokens", "completions max_tokens")]
    for key, what in compared:
        yield from _changed(
            before,
            after,
            key,
            "generation_defaults",
            f"default {what}: {{old}} -> {{new}}",
            why.format(what=what),
            matters=True,
        )
    old, new = before.get("chat_sampling"), after.get("chat_sampling")
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        for key in sorted(set(old) | set(new)):
            if old.get(key) != new.get(key):
                shown = [side.get(key, "vLLM's default") for side in (old, new)]
                yield _serving(
                    f"default chat {key}: {shown[0]} -> {shown[1]}",
                    "generation_defaults",
                    old.get(key),
                    new.get(key),
                    why.format(what=key),
                )


def _wire_extensions(baseline: Observed, target: Observed) -> Iterator[Difference]:
    before, after = _section(baseline, "wire_extensions"), _section(target, "wire_extensions")
    for kind in sorted(set(before) | set(after)):
        if kind not in before or kind not in after:
            side = "baseline" if kind not in before else "target"
            why = _section(baseline if side == "baseline" else target, "unobserved").get("wire_extensions")
            yield _serving(
                f"{kind} extension fields not compared",
                "wire_extensions",
                before.get(kind, "not observed"),
                after.get(kind, "not observed"),
                f"the {side} has no {kind} answer ({why or 'not in its capture'}): {HOW_TO_SEE['wire_extensions']}, "
                "or list wire_extensions under profile_diff.ignore in the profile",
            )
            continue
        old, new = set(before[kind]), set(after[kind])
        for name in sorted(old - new):
            yield _serving(
                f"{kind} extension field removed: {name}",
                "wire_extensions",
                name,
                None,
                f"clients that read vLLM's {name} from {kind} answers (token-id and RL pipelines, eval harnesses, "
                "typed SDK models generated from vLLM's schema) find it gone",
            )
        for name in sorted(new - old):
            yield _info(
                f"{kind} extension field added: {name}",
                "wire_extensions",
                None,
                name,
                "a new field OpenAI does not define breaks no client that ignores unknown fields "
                "(the wire suite's strict_openai says whether yours may)",
            )


# Aspects a capture may fail to see, how it shows (besides an ``unobserved`` entry
# naming why), and what makes it visible. A difference that cannot be decided is a
# failure that says so, unless the profile lists the aspect under profile_diff.ignore.
ASPECTS: dict[str, tuple[Callable[[Observed], bool], str]] = {
    "routes": (
        lambda o: o.get("routes") is None,
        "serve /openapi.json to the run, or let OPTIONS requests through to vLLM's router",
    ),
    "auth": (
        lambda o: _section(o, "auth").get("posture") not in ("required", "none"),
        "let GET /v1/models through to vLLM without a key",
    ),
    "scale_out": (
        lambda o: _section(o, "scale_out").get("state") not in ("enabled", "disabled"),
        "let the scale-out routes through to vLLM (the probe sends {} and triggers nothing)",
    ),
    "validation_error": (
        lambda o: _section(o, "validation_error").get("bounded") is None,
        "serve one of the malformed-request routes (POST /v1/completions, ...) to the run",
    ),
    "metrics": (
        lambda o: not _section(o, "metrics") or _section(o, "metrics").get("truncated") is True,
        "serve GET /metrics to the run, whole (raise --vllm-max-body if the page passes it)",
    ),
    "tokenizer": (lambda o: not _section(o, "tokenizer"), "allow POST /tokenize for the key the run uses"),
    "rendering": (
        lambda o: not _section(o, "rendering"),
        "allow POST /tokenize with messages for the key the run uses (and capture again: older captures lack it)",
    ),
    "generation_defaults": (
        lambda o: not _section(o, "generation_defaults"),
        "serve POST /v1/completions to the run (and capture again: captures before this plugin version lack it)",
    ),
    "wire_extensions": (
        lambda o: not _section(o, "wire_extensions"),
        "serve POST /v1/completions, /v1/chat/completions and /v1/responses to the run "
        "(and capture again: older captures lack it)",
    ),
}
HOW_TO_SEE = {aspect: how for aspect, (_, how) in ASPECTS.items()}


def _unseen(observed: Observed, aspect: str) -> str | None:
    """Why ``aspect`` is missing from an observation, or None when it was seen."""
    missing, _ = ASPECTS[aspect]
    if not missing(observed):
        return None
    return _section(observed, "unobserved").get(aspect) or "not in its capture"


def not_compared(baseline: Observed, target: Observed, aspect: str) -> Difference | None:
    before, after = _unseen(baseline, aspect), _unseen(target, aspect)
    if before is None and after is None:
        return None
    unseen = [f"the {side} ({why})" for side, why in (("baseline", before), ("target", after)) if why]
    return _serving(
        f"{aspect} not compared",
        aspect,
        before or "observed",
        after or "observed",
        f"could not be observed on {' nor on '.join(unseen)}: {HOW_TO_SEE[aspect]}, "
        f"or list {aspect} under profile_diff.ignore in the profile",
    )


COMPARISONS: tuple[Callable[[Observed, Observed], Iterator[Difference]], ...] = (
    _version,
    _models,
    _routes,
    _auth,
    _scale_out,
    _validation,
    _metrics,
    _tokenizer,
    _rendering,
    _generation_defaults,
    _wire_extensions,
)


ASPECT_OF: dict[Callable[[Observed, Observed], Iterator[Difference]], str] = {
    _routes: "routes",
    _auth: "auth",
    _scale_out: "scale_out",
    _validation: "validation_error",
    _metrics: "metrics",
    _tokenizer: "tokenizer",
    _rendering: "rendering",
    _generation_defaults: "generation_defaults",
    _wire_extensions: "wire_extensions",
}


def differences(baseline: Observed, target: Observed, ignore: Iterable[str] = ()) -> list[Difference]:
    """Every difference between two observations, those that matter for serving first.

    An aspect either side could not observe is one failing difference saying
    what was not seen and how to make it visible, never a silent pass; an
    aspect in ``ignore`` (profile_diff.ignore) is not compared at all.
    """
    ignored = set(ignore)
    found: dict[str, Difference] = {}
    for compare in COMPARISONS:
        aspect = ASPECT_OF.get(compare)
        if aspect in ignored:
            continue
        blind = not_compared(baseline, target, aspect) if aspect else None
        for difference in [blind] if blind else compare(baseline, target):
            found.setdefault(difference.id, difference)
    return sorted(found.values(), key=lambda d: not d.matters)


# ---- the profile_diff suite's cases ---------------------------------------------


def profile_differences(ctx: CaseContext) -> list[Difference]:
    """Each difference from the baseline, or the one finding that there is none."""
    expect, facts = ctx.expect, ctx.server
    if expect.baseline is None:
        raise NoCases("no baseline to compare with")
    if facts.observed is None:
        raise NoCases("the target was not observed (the run's controlling process makes the observation)")
    ignore = expect.declared("profile_diff", "ignore").value
    return differences(expect.baseline.data["observed"], facts.observed, ignore) or [NO_DIFFERENCE]
