"""Capture a target's serving profile: what it is and how it behaves, seen from outside.

What an operator versions and canaries is the model's serving profile, not
the image tag: the vLLM version, the model ids and their max_model_len, the
route table, whether /v1 answers without a key, the scale-out state, how a
malformed request is answered, the metric names, and a fingerprint of the
tokenizer, the rendering corpus (what the model sees for a fixed set of
conversations), the generation defaults and the fields vLLM adds to OpenAI's
answers. ``observe`` reads all of it with a handful of harmless requests
(the generation ones ask for a few tokens); ``write_profile`` writes it as a serving profile in the one
profile schema, with what was seen under ``observed:`` and the declarations
it implies (``endpoint:``, ``context:``) filled in for review. A capture can
then be a ``--vllm-baseline`` for another server, or, once reviewed, a
``--vllm-profile``.

Nothing secret goes in: the API key is never part of a request body or a
URL we record, the URL loses any user:password and query, and the written
text still passes through the run's redactor.
"""

from __future__ import annotations

import datetime
import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from packaging.version import Version

from pytest_vllm_conformance import __version__
from pytest_vllm_conformance.catalogue.contracts import Catalogue
from pytest_vllm_conformance.catalogue.serving_profile import Profile, validate
from pytest_vllm_conformance.catalogue.vllm_answers import reached_handler, scale_out_refusal_status, validation_listing
from pytest_vllm_conformance.connection import discovery, user_files
from pytest_vllm_conformance.connection.client import BoundedClient, Response, display_url
from pytest_vllm_conformance.connection.discovery import ServerFacts
from pytest_vllm_conformance.connection.secrets import Redactor
from pytest_vllm_conformance.observed import diff_report as diff_markdown
from pytest_vllm_conformance.observed.generation_defaults import observe_defaults
from pytest_vllm_conformance.observed.rendering import render_corpus
from pytest_vllm_conformance.observed.wire_extensions import observe_extensions
from pytest_vllm_conformance.protocol.error_envelope import error_message
from pytest_vllm_conformance.protocol.prometheus import family_names
from pytest_vllm_conformance.protocol.tokenize import TokenizeUnavailable, token_ids

# Tokenized for the fingerprint; stored in the capture so a later capture can tell it used the same text.
FINGERPRINT_TEXT = (
    "Serving profile fingerprint: The quick brown fox jumps over 13 lazy dogs; naïve café, 東京, def f(x): return x**2"
)
# Wrong-typed items in the one malformed request: enough to tell a summarised error from a full listing.
MALFORMED_ITEMS = 100


def observe(
    client: BoundedClient, facts: ServerFacts, catalogue: Catalogue, baseline_routes: list[str] | None = None
) -> dict[str, Any]:
    """The ``observed:`` section of a capture (plain data, JSON/YAML-safe).

    ``baseline_routes``: the baseline's routes, each probed here when the
    target's table does not list it, so a removal is seen, not assumed.
    """
    version = facts.parsed_version
    unobserved: dict[str, str] = {}

    def fact(name: str) -> Any:
        return catalogue.fact(name, version)

    routes, routes_unknown = observed_routes(client, facts, baseline_routes or [])
    observed = {
        "captured_at": datetime.datetime.now(datetime.UTC).replace(microsecond=0).isoformat(),
        "captured_by": f"pytest-vllm-conformance {__version__}",
        "url": public_url(facts.url),
        "vllm_version": facts.version,
        "model": facts.model,
        "models": [{"id": card.id, "max_model_len": card.max_model_len, "root": card.root} for card in facts.models],
        "max_model_len": facts.max_model_len,
        "routes": routes,
        "routes_source": facts.inventory.source if facts.inventory else None,
        "routes_unknown": routes_unknown,
        "auth": auth_posture(client, fact("auth_failure_status"), unobserved),
        "scale_out": scale_out_state(client, version, fact, unobserved),
        "validation_error": validation_error(client, facts, fact("malformed_list_requests"), unobserved),
        "metrics": metric_names(client, unobserved),
        "tokenizer": tokenizer_fingerprint(client, facts.model, unobserved),
        "rendering": render_corpus(client, facts.model, unobserved),
        "generation_defaults": observe_defaults(client, facts.model, facts.max_model_len, unobserved),
        "wire_extensions": observe_extensions(client, facts.model, unobserved),
    }
    if routes is None:
        unobserved["routes"] = facts.inventory.source if facts.inventory else "the server hides /openapi.json"
    observed["unobserved"] = unobserved
    return observed


def observe_and_record(
    client: BoundedClient,
    facts: ServerFacts,
    catalogue: Catalogue,
    *,
    capture_path: Path | None,
    baseline: Profile | None,
    diff_report: Path | None,
    redactor: Redactor,
    baseline_ignore: list[str] | None = None,
    start_clocks: dict[str, dict[str, float]] | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """Observe the target once; write the capture and the diff against the baseline.

    Returns the observation (handed to the suites in the facts) and one line
    per file written, for the report header. OSError when a file cannot be written.
    """
    baseline_routes = (baseline.data["observed"].get("routes") or []) if baseline is not None else []
    observed = observe(client, facts, catalogue, baseline_routes)
    if start_clocks:  # the starts of a server this run started: a later run's baseline for its own start
        observed["start_clocks"] = start_clocks
    ignore = baseline_ignore or ()
    notes = []
    if capture_path:
        notes.append(f"vllm capture: {write_profile(capture_path, observed, redactor)}")
    if baseline is not None:
        report = diff_report or diff_markdown.default_report_path(baseline.path or Path("baseline.yaml"))
        written, found = diff_markdown.write_report(
            report, baseline.data["observed"], str(baseline.path), observed, redact=redactor, ignore=ignore
        )
        matter = sum(difference.matters for difference in found)
        notes.append(
            f"vllm baseline: {baseline.path}: {len(found)} difference(s), {matter} that matter for serving; "
            f"diff {written}"
        )
    return observed, notes


def captured_profile(observed: dict[str, Any]) -> dict[str, Any]:
    """A whole profile document: the declarations the observation implies, and the observation."""
    endpoint = {}
    if observed["scale_out"]["state"] in ("enabled", "disabled"):
        endpoint["scale_out"] = observed["scale_out"]["state"]
    if observed["auth"]["posture"] in ("required", "none"):
        endpoint["auth"] = observed["auth"]["posture"]
    document: dict[str, Any] = {
        "profile": 1,
        "name": f"capture of {observed['model']}",
        "description": (
            f"Captured from {observed['url']} (vLLM {observed['vllm_version'] or 'unknown'}) at "
            f"{observed['captured_at']} by {observed['captured_by']}. The endpoint and context sections "
            "are what the server did, not what it should do: review them before using this file as --vllm-profile."
        ),
    }
    if endpoint:
        document["endpoint"] = endpoint
    if isinstance(observed["max_model_len"], int):
        document["context"] = {"max_model_len": observed["max_model_len"]}
    document["observed"] = observed
    validate(document, source="captured profile")
    return document


def write_profile(path: Path, observed: dict[str, Any], redactor: Redactor) -> Path:
    text = user_files.dump_yaml(captured_profile(observed), sort_keys=False, allow_unicode=True, width=100)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(redactor(text))
    return path


# ---- the probes; each one survives a server that does not answer ------------


def public_url(url: str) -> str:
    """The URL without user:password, query or fragment: a token can hide in any of them."""
    parts = urlsplit(display_url(url))
    return urlunsplit(parts._replace(query="", fragment=""))


def route_list(routes: dict[str, tuple[str, ...]] | None) -> list[str] | None:
    if routes is None:
        return None
    return sorted(f"{method} {path}" for path, methods in routes.items() for method in methods)


def observed_routes(
    client: BoundedClient, facts: ServerFacts, baseline_routes: list[str]
) -> tuple[list[str] | None, list[str]]:
    """The target's routes, plus those of the baseline a probe finds here; and the baseline's a probe could not tell."""
    routes = route_list(facts.routes)
    missing = [route for route in baseline_routes if route not in (routes or [])]
    found, unknown = [], []
    answers: dict[str, Any] = {}
    for route in missing:
        method, _, path = route.partition(" ")
        if path not in answers:
            answers[path] = discovery.options_probe(client, path)
        state = discovery.route_state(answers[path], method)
        if state == discovery.MOUNTED:
            found.append(route)
        elif state != discovery.NOT_MOUNTED:
            unknown.append(route)
    if routes is None and not found:
        return None, unknown
    return sorted({*(routes or []), *found}), unknown


def _answered(response: Response | None, what: str) -> str:
    return f"{what} answered {response.status}" if response is not None else f"{what} got no answer"


def auth_posture(client: BoundedClient, refusal_status: int, unobserved: dict[str, str]) -> dict[str, Any]:
    response = client.answer_or_none("GET", "/v1/models", auth=False)
    status = response.status if response else None
    posture = {refusal_status: "required", 200: "none"}.get(status, "unknown") if status is not None else "unknown"
    if posture == "unknown":
        unobserved["auth"] = _answered(response, "GET /v1/models without a key")
    return {"v1_models_without_key": status, "posture": posture}


def scale_out_state(
    client: BoundedClient, version: Version | None, fact: Callable[[str], Any], unobserved: dict[str, str]
) -> dict[str, Any]:
    """Probe one scale-out route with ``{}``: a live handler refuses the body, a closed gate the route."""
    route = next(r for r in fact("scale_out_routes") if version is None or version >= Version(r["since"]))
    response = client.answer_or_none(route["method"], route["path"], json_body={})
    status = response.status if response else None
    gate = fact("scale_out_gate")
    refusal = scale_out_refusal_status(gate, route["path"])
    if response is not None and reached_handler(response):
        state = "enabled"
    elif status is not None and status == refusal:
        state = "disabled"
    else:
        state = "unknown"
        unobserved["scale_out"] = (
            f"{_answered(response, route['method'] + ' ' + route['path'])}, neither its handler's answer "
            f"nor the version's refusal ({refusal})"
        )
    return {"probe": f"{route['method']} {route['path']}", "status": status, "state": state}


def validation_error(
    client: BoundedClient, facts: ServerFacts, requests: list[dict[str, Any]], unobserved: dict[str, str]
) -> dict[str, Any] | None:
    """One malformed request: its status, size, and whether the error lists every problem."""
    entry = next((r for r in requests if facts.serves("POST", r["path"])), None)
    if entry is None:
        unobserved["validation_error"] = f"the server serves none of {[r['path'] for r in requests]}"
        return None
    body = {"model": facts.model, **entry.get("base", {}), entry["field"]: [entry["item"]] * MALFORMED_ITEMS}
    response = client.answer_or_none("POST", entry["path"], json_body=body)
    summary = f"POST {entry['path']} {entry['field']}x{MALFORMED_ITEMS}"
    if response is None:
        unobserved["validation_error"] = f"{summary} got no answer"
        return {
            "request": summary,
            "status": None,
            "bytes": 0,
            "truncated": False,
            "errors_reported": None,
            "entries_listed": None,
            "bounded": None,
        }
    message = None if response.truncated else error_message(response)
    listing = validation_listing(message) if message else None
    reported, listed = (listing.reported, listing.listed) if listing else (None, None)
    # Cut at the byte cap is unbounded; whole without vLLM's error message says nothing either way.
    bounded: bool | None = False if response.truncated else None
    if message is not None:
        bounded = reported is None or listed is None or listed < reported
    elif not response.truncated:
        unobserved["validation_error"] = f"{_answered(response, summary)} without an error message"
    return {
        "request": summary,
        "status": response.status,
        "bytes": response.bytes_seen,
        "truncated": response.truncated,
        "errors_reported": reported,
        "entries_listed": listed,
        "bounded": bounded,
    }


def metric_names(client: BoundedClient, unobserved: dict[str, str]) -> dict[str, Any] | None:
    response = client.answer_or_none("GET", "/metrics")
    if response is None or response.status != 200:
        unobserved["metrics"] = _answered(response, "GET /metrics")
        return None
    if response.truncated:  # the names seen are kept, but a cut page is not compared as if whole
        unobserved["metrics"] = f"GET /metrics passed the byte cap ({response.size_text}): its names are partial"
    return {"names": family_names(response.text, cut=response.truncated), "truncated": response.truncated}


def token_ids_sha256(tokens: list[int]) -> str:
    return hashlib.sha256(json.dumps(tokens, separators=(",", ":")).encode()).hexdigest()


def tokenizer_fingerprint(client: BoundedClient, model: str, unobserved: dict[str, str]) -> dict[str, Any] | None:
    """sha256 of the ids /tokenize gives for a fixed text, and for the same text as a chat message."""
    try:
        tokens = token_ids(client, model, prompt=FINGERPRINT_TEXT)
    except TokenizeUnavailable as exc:
        plain = exc.response
        unobserved["tokenizer"] = _answered(plain, "POST /tokenize") + (
            "" if plain is None or plain.status != 200 else " without token ids"
        )
        return None
    try:
        chat_tokens: list[int] | None = token_ids(
            client, model, messages=[{"role": "user", "content": FINGERPRINT_TEXT}]
        )
    except TokenizeUnavailable:
        chat_tokens = None
    return {
        "text": FINGERPRINT_TEXT,
        "token_count": len(tokens),
        "sha256": token_ids_sha256(tokens),
        # A model without a chat template has no chat fingerprint.
        "chat_sha256": token_ids_sha256(chat_tokens) if isinstance(chat_tokens, list) else None,
    }
