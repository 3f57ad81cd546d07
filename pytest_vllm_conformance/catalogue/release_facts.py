"""The facts the suites read, typed: what the detected release does (the catalogue's ``facts/``).

``vllm_expect.release.scale_out_gate["refusal_status"]`` reads the same value
as ``vllm_expect.release.scale_out_gate["refusal_status"]``, with its keys and
types known to mypy instead of ``Any``. Each property is named after its fact;
``tests/unit/test_release_facts.py`` checks every version range of each one
against the property's type, so the data cannot drift from what a suite reads.
Facts only a feature folder reads stay behind ``Expectations.fact``. ``padding_note`` words what
``json_whitespace_control`` means for a JSON answer that ran to max_tokens (structured outputs, tool calls).
No ``from __future__ import annotations`` here: TypedDict reads ``NotRequired`` only from evaluated
annotations on Python 3.11.
"""

from collections.abc import Callable
from typing import Any, Literal, NotRequired, TypedDict


class PromptCacheUsage(TypedDict):
    field: str  # where a response shows prompt tokens served from the prefix cache
    flag: str  # the serve flag that makes it show them
    prefix_caching_default: bool


class ValidationErrorBounds(TypedDict):
    bounded: bool
    max_entries: int | None
    note: NotRequired[str]
    more_marker: NotRequired[str]  # with {n}: how a bounded list says what it left out


class ScaleOutGate(TypedDict):
    gate: Literal["none", "unregistered", "stub"]
    note: NotRequired[str]
    refusal_status: NotRequired[int]
    refusal_status_by_path: NotRequired[dict[str, int]]
    refusal_error_type: NotRequired[str]


class JsonWhitespaceControl(TypedDict):
    request_fields: dict[str, Any] | None  # structured_outputs fields that forbid free whitespace, or None
    server_flag: str
    flag_reaches_tool_calls: bool


def padding_note(whitespace_control: JsonWhitespaceControl, version_label: str, *, tool_calls: bool = False) -> str:
    """Why a JSON answer may run to max_tokens, and what would stop it (fact ``json_whitespace_control``)."""
    if tool_calls and not whitespace_control["flag_reaches_tool_calls"]:
        return (
            f"a model may pad tool-call arguments with the whitespace JSON allows; {version_label} has no request "
            "field or server flag that forbids it there"
        )
    if whitespace_control.get("request_fields"):
        return f"though the request forbade free whitespace ({whitespace_control['request_fields']})"
    return (
        f"the model pads with the whitespace the constraint allows; {version_label} lets no request forbid it, a "
        f"server started with {whitespace_control['server_flag']} does"
    )


class GuidedField(TypedDict):
    field: str
    value: Any  # what the request sends in the removed field
    constraint: dict[str, Any]  # the same constraint in today's structured_outputs
    instead: str


class RemovedGuidedFields(TypedDict):
    answer: str
    fields: list[GuidedField]


class RenamedParameter(TypedDict):
    route: str
    field: str  # the old name, still accepted
    now: str  # the name that replaces it
    answer: str


class SamplingParameters(TypedDict):
    accepted: dict[str, list[str]]  # route -> the sampling fields its request model has
    renamed: list[RenamedParameter]
    ignored: dict[str, list[str]]  # route -> parameters its request model lacks: answered 200 and dropped
    unknown_answer: str  # what any field the request model lacks gets


class YarnMaxModelLen(TypedDict):
    rule: str


class ToolChoiceWithoutParser(TypedDict):
    status: int
    message: str


class ResponsesTerminalEvent(TypedDict):
    vllm_sends: str
    statuses: list[str]
    why: str


class ShutdownModes(TypedDict):
    flag: str  # the serve flag that sets how long SIGTERM lets in-flight requests finish
    default_seconds: int
    default_mode: Literal["abort", "drain"]
    abort_effect: str  # what the default's abort does to callers, as read and measured
    drain_effect: str
    drain_new_request_status: int  # what a new request gets while the server drains
    drain_health_status: int  # what /health answers while the server drains


class TinyCompletion(TypedDict):
    path: str
    body: dict[str, Any]


class PromptEmbedsDisabledRefusal(TypedDict):
    status: int
    message: str  # a phrase only the disabled refusal's message carries


class PromptEmbedsDecodeBound(TypedDict):
    bounded: bool
    note: NotRequired[str]
    default_limit_bytes: NotRequired[int]


class StartupLogClocks(TypedDict):
    process_ready: str | None  # the line (a regular expression) whose timestamp is the clock; None: no line marks it
    endpoint_ready: str | None
    first_token: str | None
    first_token_unread: str  # why the log does not show the first token


class StartupPhase(TypedDict):
    meaning: str
    took: NotRequired[str]  # a regular expression with the phase's own seconds
    ends: NotRequired[str]  # a regular expression for the line that ends it, timed from the first line
    optional: NotRequired[bool]  # a path a start may not take (torch.compile): its absence is no changed line


class ReleaseFacts:
    """The typed facts of one release; ``read`` is ``Expectations.fact``."""

    def __init__(self, read: Callable[[str], Any]) -> None:
        self._read = read

    @property
    def unguarded_route_risks(self) -> dict[str, str]:
        return self._read("unguarded_route_risks")

    @property
    def prompt_cache_usage(self) -> PromptCacheUsage:
        return self._read("prompt_cache_usage")

    @property
    def validation_error_bounds(self) -> ValidationErrorBounds:
        return self._read("validation_error_bounds")

    @property
    def validation_error_status(self) -> int:
        return self._read("validation_error_status")

    @property
    def scale_out_gate(self) -> ScaleOutGate:
        return self._read("scale_out_gate")

    @property
    def json_whitespace_control(self) -> JsonWhitespaceControl:
        return self._read("json_whitespace_control")

    @property
    def removed_guided_fields(self) -> RemovedGuidedFields:
        return self._read("removed_guided_fields")

    @property
    def sampling_parameters(self) -> SamplingParameters:
        return self._read("sampling_parameters")

    @property
    def yarn_max_model_len(self) -> YarnMaxModelLen:
        return self._read("yarn_max_model_len")

    @property
    def tool_arguments_constrained_without_strict(self) -> bool:
        return self._read("tool_arguments_constrained_without_strict")

    @property
    def tool_choice_without_parser(self) -> ToolChoiceWithoutParser:
        return self._read("tool_choice_without_parser")

    @property
    def wire_responses_terminal_event(self) -> ResponsesTerminalEvent:
        return self._read("wire_responses_terminal_event")

    @property
    def reasoning_route_shapes(self) -> dict[str, dict[str, str]]:
        return self._read("reasoning_route_shapes")

    @property
    def health_path(self) -> str:
        return self._read("health_path")

    @property
    def admission_rejection_counter(self) -> str | None:
        return self._read("admission_rejection_counter")

    @property
    def shutdown_modes(self) -> ShutdownModes:
        return self._read("shutdown_modes")

    @property
    def tiny_completion(self) -> TinyCompletion:
        return self._read("tiny_completion")

    @property
    def metrics_path(self) -> str:
        return self._read("metrics_path")

    @property
    def finished_request_counter(self) -> str:
        return self._read("finished_request_counter")

    @property
    def metric_prefix(self) -> str:
        return self._read("metric_prefix")

    @property
    def metric_renames(self) -> dict[str, str]:
        return self._read("metric_renames")

    @property
    def metric_conditions(self) -> dict[str, str]:
        return self._read("metric_conditions")

    @property
    def prompt_embeds_parameter(self) -> str:
        return self._read("prompt_embeds_parameter")

    @property
    def prompt_embeds_disabled_refusal(self) -> PromptEmbedsDisabledRefusal:
        return self._read("prompt_embeds_disabled_refusal")

    @property
    def prompt_embeds_hidden_size_hint(self) -> str:
        return self._read("prompt_embeds_hidden_size_hint")

    @property
    def prompt_embeds_decode_bound(self) -> PromptEmbedsDecodeBound:
        return self._read("prompt_embeds_decode_bound")

    @property
    def startup_log_phases(self) -> dict[str, StartupPhase]:
        return self._read("startup_log_phases")

    @property
    def startup_log_clocks(self) -> StartupLogClocks:
        return self._read("startup_log_clocks")
