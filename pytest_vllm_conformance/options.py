"""Every option of the plugin, and where each value came from.

A value is taken from the command line, else the environment, else the ini
file (``[tool.pytest.ini_options]``, ``pytest.ini``...), else the default; the
source travels with the value so the report header can say which one won
(the way pytest-django reports its settings).
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pytest

Kind = Literal["str", "int", "float", "path", "list", "flag"]
Source = Literal["cli", "env", "ini", "default"]

GROUP = "vllm-conformance"
MIB = 1024 * 1024


class Secret:
    """A value that must never be shown: its repr and str are masked."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(("Secret", self._value))

    def __bool__(self) -> bool:
        return bool(self._value)


@dataclass(frozen=True)
class Option:
    name: str
    help: str
    kind: Kind = "str"
    default: Any = None
    env: str | None = None
    secret: bool = False
    metavar: str | None = None

    @property
    def flag(self) -> str:
        return f"--{self.name}"

    @property
    def dest(self) -> str:
        return self.name.replace("-", "_")

    @property
    def key(self) -> str:
        """Attribute name on Settings: ``vllm-max-body`` -> ``max_body``."""
        return self.dest.removeprefix("vllm_")


OPTIONS: tuple[Option, ...] = (
    Option("vllm-url", "Base URL of the vLLM server under test.", env="VLLM_URL", metavar="URL"),
    Option(
        "vllm-api-key",
        "API key sent as 'Authorization: Bearer'. Never printed; prefer the env variable.",
        env="VLLM_API_KEY",
        secret=True,
        metavar="KEY",
    ),
    Option(
        "vllm-model",
        "Model id to test (default: the first model the server lists).",
        env="VLLM_CONFORMANCE_MODEL",
        metavar="ID",
    ),
    Option(
        "vllm-profile",
        "Serving profile (YAML) declaring what the server must do.",
        kind="path",
        env="VLLM_CONFORMANCE_PROFILE",
        metavar="PATH",
    ),
    Option(
        "vllm-timeout",
        "Seconds allowed for one request, body included.",
        kind="float",
        default=30.0,
        env="VLLM_CONFORMANCE_TIMEOUT",
        metavar="S",
    ),
    Option(
        "vllm-max-body",
        "Largest response body read, in bytes; the rest is dropped and recorded as truncated.",
        kind="int",
        default=MIB,
        env="VLLM_CONFORMANCE_MAX_BODY",
        metavar="BYTES",
    ),
    Option(
        "vllm-serve",
        "Start 'vllm serve MODEL_DIR' on 127.0.0.1 when no --vllm-url is given.",
        kind="path",
        env="VLLM_CONFORMANCE_SERVE",
        metavar="MODEL_DIR",
    ),
    Option(
        "vllm-serve-arg",
        "Extra argument for the embedded 'vllm serve' (repeatable; env and ini: shell words).",
        kind="list",
        default=(),
        env="VLLM_CONFORMANCE_SERVE_ARGS",
        metavar="ARG",
    ),
    Option(
        "vllm-serve-python",
        "Python interpreter that has vLLM installed (default: the one running pytest).",
        kind="path",
        env="VLLM_CONFORMANCE_SERVE_PYTHON",
        metavar="PYTHON",
    ),
    Option(
        "vllm-serve-timeout",
        "Seconds to wait for the embedded server's /health.",
        kind="float",
        default=300.0,
        env="VLLM_CONFORMANCE_SERVE_TIMEOUT",
        metavar="S",
    ),
    Option(
        "vllm-serve-log",
        "File for the embedded server's log (default: in pytest's temporary directory).",
        kind="path",
        env="VLLM_CONFORMANCE_SERVE_LOG",
        metavar="PATH",
    ),
    Option(
        "vllm-list-contracts",
        "Print the catalogue of contracts (id, feature, versions, statement) and exit.",
        kind="flag",
        default=False,
    ),
)

BY_KEY: dict[str, Option] = {option.key: option for option in OPTIONS}


@dataclass(frozen=True)
class Setting:
    value: Any
    source: Source


class Settings:
    """Resolved option values; ``settings.url`` is the value, ``settings.source('url')`` its origin."""

    def __init__(self, values: Mapping[str, Setting]) -> None:
        self._values = dict(values)

    def __getattr__(self, key: str) -> Any:
        try:
            return self._values[key].value
        except KeyError:
            raise AttributeError(key) from None

    def source(self, key: str) -> Source:
        return self._values[key].source

    def secrets(self) -> list[str]:
        """Plain values of every secret setting, for redaction."""
        return [
            setting.value.reveal()
            for key, setting in self._values.items()
            if BY_KEY[key].secret and setting.value
        ]

    def describe(self) -> list[str]:
        """One line per option that is not at its default, secrets masked."""
        lines = []
        for option in OPTIONS:
            setting = self._values[option.key]
            if setting.source == "default" or option.kind == "flag":
                continue
            shown = "set" if option.secret else _show(setting.value)
            lines.append(f"{option.flag}: {shown} (from {setting.source})")
        return lines


def _show(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return shlex.join(str(item) for item in value)
    return str(value)


def register(parser: pytest.Parser) -> None:
    group = parser.getgroup(GROUP, "vLLM conformance")
    for option in OPTIONS:
        fallbacks = []
        if option.env:
            fallbacks.append(f"env {option.env}")
        if option.kind != "flag":
            fallbacks.append(f"ini {option.dest}")
        if option.default not in (None, (), False):
            fallbacks.append(f"default {option.default}")
        help_text = option.help + (f" [{'; '.join(fallbacks)}]" if fallbacks else "")
        if option.kind == "flag":
            group.addoption(option.flag, action="store_true", default=False, dest=option.dest, help=help_text)
            continue
        group.addoption(
            option.flag,
            action="append" if option.kind == "list" else "store",
            default=None,
            dest=option.dest,
            metavar=option.metavar,
            help=help_text,
        )
        parser.addini(option.dest, option.help, type="args" if option.kind == "list" else "string")


def resolve(config: pytest.Config, environ: Mapping[str, str] | None = None) -> Settings:
    environ = os.environ if environ is None else environ
    values = {}
    for option in OPTIONS:
        values[option.key] = _resolve_one(option, config, environ)
    return Settings(values)


def _resolve_one(option: Option, config: pytest.Config, environ: Mapping[str, str]) -> Setting:
    if option.kind == "flag":
        return Setting(bool(config.getoption(option.dest)), "cli")
    cli = config.getoption(option.dest)
    if cli is not None:
        return Setting(_convert(option, cli, "cli"), "cli")
    if option.env and environ.get(option.env):
        raw = environ[option.env]
        return Setting(_convert(option, shlex.split(raw) if option.kind == "list" else raw, "env"), "env")
    ini = config.getini(option.dest)
    if ini:
        return Setting(_convert(option, ini, "ini"), "ini")
    return Setting(option.default, "default")


def _convert(option: Option, raw: Any, source: Source) -> Any:
    where = {"cli": option.flag, "env": f"env {option.env}", "ini": f"ini {option.dest}"}[source]
    try:
        if option.kind == "int":
            value = int(raw)
            if value <= 0:
                raise ValueError("must be positive")
            return value
        if option.kind == "float":
            value = float(raw)
            if value <= 0:
                raise ValueError("must be positive")
            return value
        if option.kind == "path":
            return Path(raw).expanduser()
        if option.kind == "list":
            return tuple(raw)
    except ValueError as exc:
        shown = "***" if option.secret else repr(raw)
        raise pytest.UsageError(f"{option.flag} (from {where}): {shown} is not valid: {exc}") from None
    if option.secret:
        return Secret(str(raw))
    return str(raw)
