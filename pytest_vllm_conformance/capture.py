"""Capture a target's serving profile: what it is and how it behaves, seen from outside.

What an operator versions and canaries is the model's serving profile, not
the image tag: the vLLM version, the model ids and their max_model_len, the
route table, whether /v1 answers without a key, the scale-out state, how a
malformed request is answered, the metric names, and a fingerprint of the
tokenizer. ``observe`` reads all of it with a handful of harmless requests
(no generation); ``write_profile`` writes it as a serving profile in the one
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
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import yaml
from packaging.version import Version

from . import __version__, profile_diff
from .client import BoundedClient, RequestTimeout, Response, TransportFailure, display_url
from .contracts import Catalogue
from .discovery import ServerFacts
from .reporting import Redactor
from .serving_profile import Profile, validate
from .vllm_answers import error_message, reached_handler, scale_out_refusal_status, validation_listing

# Tokenized for the fingerprint; stored in the capture so a later capture can tell it used the same text.
FINGERPRINT_TEXT = "Serving profile fingerprint: The quick brown fox jumps over 13 lazy dogs; naïve café, 東京, def f(x): return x**2"
# Wrong-typed items in the one malformed request: enough to tell a summarised error from a full listing.
MALFORMED_ITEMS = 100
METRIC_TYPE_LINE = re.compile(r"^# TYPE (\S+) \S+")
METRIC_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)")


def observe(client: BoundedClient, facts: ServerFacts, catalogue: Catalogue) -> dict[str, Any]:
    """The ``observed:`` section of a capture (plain data, JSON/YAML-safe)."""
    version = facts.parsed_version

    def fact(name: str) -> Any:
        return catalogue.fact(name, version)

    return {
        "captured_at": datetime.datetime.now(datetime.UTC).replace(microsecond=0).isoformat(),
        "captured_by": f"pytest-vllm-conformance {__version__}",
        "url": public_url(facts.url),
        "vllm_version": facts.version,
        "model": facts.model,
        "models": [
            {"id": card.id, "max_model_len": card.max_model_len, "root": card.root} for card in facts.models
        ],
        "max_model_len": facts.max_model_len,
        "routes": route_list(facts.routes),
        "auth": auth_posture(client, fact("auth_failure_status")),
        "scale_out": scale_out_state(client, version, fact),
        "validation_error": validation_error(client, facts, fact("malformed_list_requests")),
        "metrics": metric_names(client),
        "tokenizer": tokenizer_fingerprint(client, facts.model),
    }


def observe_and_record(
    client: BoundedClient,
    facts: ServerFacts,
    catalogue: Catalogue,
    *,
    capture_path: Path | None,
    baseline: Profile | None,
    diff_report: Path | None,
    redactor: Redactor,
) -> tuple[dict[str, Any], list[str]]:
    """Observe the target once; write the capture and the diff against the baseline.

    Returns the observation (handed to the suites in the facts) and one line
    per file written, for the report header. OSError when a file cannot be written.
    """
    observed = observe(client, facts, catalogue)
    notes = []
    if capture_path:
        notes.append(f"vllm capture: {write_profile(capture_path, observed, redactor)}")
    if baseline is not None:
        report = diff_report or profile_diff.default_report_path(baseline.path)
        written, found = profile_diff.write_report(
            report, baseline.data["observed"], str(baseline.path), observed, redact=redactor
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
    text = yaml.safe_dump(captured_profile(observed), sort_keys=False, allow_unicode=True, width=100)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(redactor(text))
    return path


# ---- the probes; each one survives a server that does not answer ------------


def _send(client: BoundedClient, method: str, path: str, **kw: Any) -> Response | None:
    try:
        return client.request(method, path, **kw)
    except (TransportFailure, RequestTimeout):
        return None


def public_url(url: str) -> str:
    """The URL without user:password, query or fragment: a token can hide in any of them."""
    parts = urlsplit(display_url(url))
    return urlunsplit(parts._replace(query="", fragment=""))


def route_list(routes: dict[str, tuple[str, ...]] | None) -> list[str] | None:
    if routes is None:
        return None
    return sorted(f"{method} {path}" for path, methods in routes.items() for method in methods)


def auth_posture(client: BoundedClient, refusal_status: int) -> dict[str, Any]:
    response = _send(client, "GET", "/v1/models", auth=False)
    status = response.status if response else None
    posture = {refusal_status: "required", 200: "none"}.get(status, "unknown")
    return {"v1_models_without_key": status, "posture": posture}


def scale_out_state(client: BoundedClient, version: Version | None, fact: Callable[[str], Any]) -> dict[str, Any]:
    """Probe one scale-out route with ``{}``: a live handler refuses the body, a closed gate the route."""
    route = next(r for r in fact("scale_out_routes") if version is None or version >= Version(r["since"]))
    response = _send(client, route["method"], route["path"], json_body={})
    status = response.status if response else None
    gate = fact("scale_out_gate")
    refusal = scale_out_refusal_status(gate, route["path"])
    if response is not None and reached_handler(response):
        state = "enabled"
    elif status is not None and status == refusal:
        state = "disabled"
    else:
        state = "unknown"
    return {"probe": f"{route['method']} {route['path']}", "status": status, "state": state}


def validation_error(client: BoundedClient, facts: ServerFacts, requests: list[dict[str, Any]]) -> dict[str, Any] | None:
    """One malformed request: its status, size, and whether the error lists every problem."""
    entry = next((r for r in requests if facts.serves("POST", r["path"])), None)
    if entry is None:
        return None
    body = {"model": facts.model, **entry.get("base", {}), entry["field"]: [entry["item"]] * MALFORMED_ITEMS}
    response = _send(client, "POST", entry["path"], json_body=body)
    summary = f"POST {entry['path']} {entry['field']}x{MALFORMED_ITEMS}"
    if response is None:
        return {"request": summary, "status": None, "bytes": 0, "truncated": False,
                "errors_reported": None, "entries_listed": None, "bounded": None}
    message = None if response.truncated else error_message(response)
    listing = validation_listing(message) if message else None
    reported, listed = (listing.reported, listing.listed) if listing else (None, None)
    bounded = not response.truncated and (reported is None or listed < reported)
    return {
        "request": summary,
        "status": response.status,
        "bytes": response.bytes_seen,
        "truncated": response.truncated,
        "errors_reported": reported,
        "entries_listed": listed,
        "bounded": bounded,
    }


def parse_metric_names(text: str) -> list[str]:
    """Metric family names from Prometheus text; ``*_created`` timestamps are not metrics of their own."""
    names = {m.group(1) for line in text.splitlines() if (m := METRIC_TYPE_LINE.match(line))}
    if not names:  # an exposition without TYPE lines: fall back to sample names
        names = {m.group(1) for line in text.splitlines() if not line.startswith("#") and (m := METRIC_SAMPLE.match(line))}
    return sorted(name for name in names if not name.endswith("_created"))


def metric_names(client: BoundedClient) -> dict[str, Any] | None:
    response = _send(client, "GET", "/metrics")
    if response is None or response.status != 200:
        return None
    return {"names": parse_metric_names(response.text), "truncated": response.truncated}


def token_ids_sha256(tokens: list[int]) -> str:
    return hashlib.sha256(json.dumps(tokens, separators=(",", ":")).encode()).hexdigest()


def tokenizer_fingerprint(client: BoundedClient, model: str) -> dict[str, Any] | None:
    """sha256 of the ids /tokenize gives for a fixed text, and for the same text as a chat message."""
    plain = _send(client, "POST", "/tokenize", json_body={"model": model, "prompt": FINGERPRINT_TEXT})
    tokens = (plain.json_or_none() or {}).get("tokens") if plain is not None and plain.status == 200 else None
    if not isinstance(tokens, list):
        return None
    chat = _send(
        client,
        "POST",
        "/tokenize",
        json_body={"model": model, "messages": [{"role": "user", "content": FINGERPRINT_TEXT}]},
    )
    chat_tokens = (chat.json_or_none() or {}).get("tokens") if chat is not None and chat.status == 200 else None
    return {
        "text": FINGERPRINT_TEXT,
        "token_count": len(tokens),
        "sha256": token_ids_sha256(tokens),
        # A model without a chat template has no chat fingerprint.
        "chat_sha256": token_ids_sha256(chat_tokens) if isinstance(chat_tokens, list) else None,
    }
