"""A fleet: the replicas one run checks, each a target of its own.

Given by ``--vllm-url`` more than once, by a fleet file (``--vllm-fleet``),
or by one host name that resolves to several addresses when the run is
asked to expand it (``--vllm-fleet-expand-dns``, or ``expand_dns: true`` in
the file). Each replica has a name: the one given, else ``host:port``. A
run with one target is not a fleet: it keeps no replica names anywhere.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import jsonschema

from pytest_vllm_conformance.connection import user_files
from pytest_vllm_conformance.connection.response import display_url

NAME_PATTERN = "^[A-Za-z0-9][A-Za-z0-9_.:-]*$"

FLEET_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "vLLM conformance fleet file",
    "type": "object",
    "additionalProperties": False,
    "required": ["replicas"],
    "properties": {
        "expand_dns": {
            "description": "Expand a replica's host name that resolves to several addresses into one replica each.",
            "type": "boolean",
        },
        "replicas": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["url"],
                "properties": {
                    "url": {"type": "string", "pattern": "^https?://"},
                    "name": {"type": "string", "pattern": NAME_PATTERN},
                    "labels": {"type": "object", "additionalProperties": {"type": ["string", "number", "boolean"]}},
                },
            },
        },
    },
}


class FleetError(ValueError):
    """A fleet file or a list of replicas that cannot be a run's targets; the message says what and where."""


@dataclass(frozen=True)
class Replica:
    name: str
    url: str
    labels: dict[str, str] = field(default_factory=dict)
    # The host name it was expanded from (--vllm-fleet-expand-dns), for the header.
    expanded_from: str | None = None


def default_name(url: str) -> str:
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"{parts.hostname}:{port}"


def load_fleet_file(path: Path, check_url: Callable[[str], str]) -> tuple[list[Replica], bool]:
    """The replicas a fleet file lists, and whether it asks for DNS expansion; ``check_url`` normalises a URL."""
    try:
        data = user_files.load_yaml(Path(path), f"fleet file {path}")
    except user_files.UserFileError as exc:
        raise FleetError(str(exc)) from None
    validator = jsonschema.Draft202012Validator(FLEET_SCHEMA)
    errors = sorted(validator.iter_errors(data), key=lambda e: list(e.absolute_path))
    if errors:
        lines = [f"fleet file {path}: {len(errors)} problem(s)"]
        for error in errors:
            where = ".".join(str(part) for part in error.absolute_path) or "(top level)"
            lines.append(f"  {where}: {error.message}")
        raise FleetError("\n".join(lines))
    replicas = []
    for index, entry in enumerate(data["replicas"]):
        try:
            url = check_url(entry["url"])
        except ValueError as exc:
            raise FleetError(f"fleet file {path}: replicas.{index}.url: {exc}") from None
        labels = {str(key): str(value) for key, value in (entry.get("labels") or {}).items()}
        replicas.append(Replica(entry.get("name") or default_name(url), url, labels))
    return replicas, bool(data.get("expand_dns"))


Resolver = Callable[[str, int], list[str]]


def resolve_addresses(host: str, port: int) -> list[str]:
    """Every distinct address ``host`` resolves to, in the resolver's order."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def expand_dns(replicas: Sequence[Replica], resolve: Resolver = resolve_addresses) -> list[Replica]:
    """A replica whose host name resolves to several addresses becomes one replica per address."""
    expanded: list[Replica] = []
    for replica in replicas:
        parts = urlsplit(replica.url)
        host = parts.hostname or ""
        if _is_address(host):
            expanded.append(replica)
            continue
        port = parts.port or (443 if parts.scheme == "https" else 80)
        try:
            addresses = resolve(host, port)
        except OSError as exc:
            raise FleetError(f"{replica.name}: cannot resolve {host}: {exc}") from None
        if len(addresses) <= 1:
            expanded.append(replica)
            continue
        userinfo = parts.netloc.rpartition("@")[0]
        for address in addresses:
            shown = f"[{address}]" if ":" in address else address
            netloc = f"{userinfo}@{shown}:{port}" if userinfo else f"{shown}:{port}"
            url = urlunsplit(parts._replace(netloc=netloc))
            expanded.append(Replica(f"{replica.name}-{address}", url, replica.labels, expanded_from=host))
    return expanded


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def unique_names(replicas: Sequence[Replica]) -> list[Replica]:
    """Names must tell replicas apart, and URLs servers: two replicas under one name, or one server listed twice
    under two names (it would pass as two replicas that agree), is a usage error."""
    seen: dict[str, str] = {}
    servers: dict[str, str] = {}
    for replica in replicas:
        if replica.name in seen:
            raise FleetError(
                f"two replicas are named {replica.name!r} ({seen[replica.name]} and {replica.url}): name them"
            )
        seen[replica.name] = replica.url
        server = same_server_key(replica.url)
        if server in servers:
            raise FleetError(
                f"replicas {servers[server]!r} and {replica.name!r} are one server ({display_url(replica.url)}): "
                "a fleet lists each replica once"
            )
        servers[server] = replica.name
    return list(replicas)


def same_server_key(url: str) -> str:
    """What tells servers apart in a URL: its scheme, host (any case) and port (the scheme's default spelled out),
    and its path prefix."""
    try:
        parts = urlsplit(url)
        port = parts.port or {"http": 80, "https": 443}.get(parts.scheme.lower())
    except ValueError:
        return url
    return f"{parts.scheme.lower()}://{(parts.hostname or '').lower()}:{port}{parts.path.rstrip('/')}"
