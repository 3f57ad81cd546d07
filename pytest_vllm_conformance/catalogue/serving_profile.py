"""Serving profiles: what a deployment is declared to do.

A profile is a YAML file validated against ``profile.schema.json``. It is
the declared half of every expectation; the other half is the detected
vLLM version's documented default (the catalogue's facts). A profile
never reaches the network.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema

from pytest_vllm_conformance.connection import user_files

SCHEMA_FILE = "profile.schema.json"


class ProfileError(Exception):
    """The profile file cannot be used; the message names the file and the field."""


@cache
def schema() -> dict[str, Any]:
    return json.loads(resources.files(__package__).joinpath(SCHEMA_FILE).read_text())


@dataclass(frozen=True)
class Profile:
    name: str
    path: Path | None
    data: dict[str, Any] = field(repr=False)

    def get(self, section: str, key: str) -> Any:
        return self.data.get(section, {}).get(key)


def load_profile(path: Path) -> Profile:
    try:
        data = user_files.load_yaml(Path(path), f"profile {path}")
    except user_files.UserFileError as exc:
        raise ProfileError(str(exc)) from None
    validate(data, source=str(path))
    return Profile(name=data["name"], path=Path(path), data=data)


def validate(data: Any, source: str) -> None:
    validator = jsonschema.Draft202012Validator(schema())
    errors = sorted(validator.iter_errors(data), key=lambda e: (len(e.absolute_path), list(e.absolute_path)))
    if not errors:
        _check_serving_workload(data, source)
        return
    lines = [f"profile {source}: {len(errors)} problem(s)"]
    for error in errors:
        where = ".".join(str(part) for part in error.absolute_path) or "(top level)"
        lines.append(f"  {where}: {_explain(error)}")
    raise ProfileError("\n".join(lines))


def _check_serving_workload(data: dict[str, Any], source: str) -> None:
    """A concurrency above the requests of a round can never be reached: the profile asks for what it cannot get."""
    serving = data.get("serving")
    if not isinstance(serving, dict) or "concurrency" not in serving:
        return
    from pytest_vllm_conformance.catalogue import contracts  # the catalogue reads profiles: imported when needed

    requests = serving.get("requests", contracts.load().declaration("serving.requests").policy)
    if serving["concurrency"] > requests:
        default = "" if "requests" in serving else " (the default)"
        raise ProfileError(
            f"profile {source}: serving.concurrency {serving['concurrency']} is above serving.requests "
            f"{requests}{default}: a round of {requests} requests never has {serving['concurrency']} in flight"
        )


def _explain(error: jsonschema.ValidationError) -> str:
    if error.validator == "enum":
        return f"{error.instance!r} is not one of {error.validator_value}"
    if error.validator == "additionalProperties":
        allowed = sorted(error.schema.get("properties", {}))
        return f"{error.message}; allowed here: {allowed}"
    return error.message
