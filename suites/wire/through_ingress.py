"""Through an ingress: whom a wire failure is due to, and what the ingress changed in the answer.

A gateway in front of vLLM (LiteLLM, an API gateway) re-serializes answers:
it may add fields, drop vLLM's extension fields, re-frame streams or rewrite
errors. Callers behind it get its answer, so the wire suite judges that one;
the same request sent straight to the server (``--vllm-url``) and judged the
same way says whether vLLM or the ingress made the difference. A failure the
direct answer does not have is still a failure (a client behind the gateway
breaks either way) but is said to be the ingress's; the fields one answer
departs from OpenAI with and the other does not are data, recorded whatever
the verdict.
"""

from __future__ import annotations

from .wire_rules import Verdict

INTRODUCED = "introduced by the ingress: the same request straight to vLLM is conformant"
NOT_INTRODUCED = "not introduced by the ingress: vLLM's own answer to the same request fails too"

# How a departure from OpenAI's schema reads in a list of changes (else the JSON type sent).
HOW = {
    "extension": "extension field",
    "undefined": "not in OpenAI's union",
    "null": "explicit null",
    "missing": "left out",
}


def attributed(through: Verdict, direct: Verdict) -> str:
    """The failure message of the ingress's answer, saying whether vLLM's answer to the same request fails too."""
    if not direct.failures:
        return f"{INTRODUCED}; {through.message()}"
    return f"{NOT_INTRODUCED}; {through.message()}\n  straight to vLLM: {direct.message()}"


def _only(side: dict[str, str], other: dict[str, str]) -> list[str]:
    return [f"{place} ({HOW.get(how, how)})" for place, how in sorted(side.items()) if other.get(place) != how]


def changes(through: Verdict, direct: Verdict) -> list[str]:
    """What the ingress changed, as report lines: the status, and the departures from OpenAI only one side has."""
    lines = []
    if through.status != direct.status:
        lines.append(f"status {direct.status} straight from vLLM, {through.status} through the ingress")
    if only_direct := _only(direct.departures, through.departures):
        lines.append("only straight from vLLM: " + ", ".join(only_direct))
    if only_through := _only(through.departures, direct.departures):
        lines.append("only through the ingress: " + ", ".join(only_through))
    return lines
