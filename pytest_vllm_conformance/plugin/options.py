"""Where each option's value came from (the options themselves: plugin/option_table.py).

A value is taken from the command line, else the environment, else the ini
file (``[tool.pytest.ini_options]``, ``pytest.ini``...), else the default; the
source travels with the value so the report header can say which one won
(the way pytest-django reports its settings).
"""

from __future__ import annotations

import math
import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

import pytest
from packaging.version import Version

from pytest_vllm_conformance.catalogue.contracts import suites_folder
from pytest_vllm_conformance.connection.secrets import Secret, key_line
from pytest_vllm_conformance.connection.settings import Settings
from pytest_vllm_conformance.plugin.option_table import OPTIONS, Option

Source = Literal["cli", "env", "ini", "default"]

GROUP = "vllm-conformance"


@dataclass(frozen=True)
class Setting:
    value: Any
    source: Source


Sources = dict[str, Source]


def describe(settings: Settings, sources: Sources) -> list[str]:
    """One line per option that is not at its default, secrets masked."""
    lines = []
    for option in OPTIONS:
        if sources[option.key] == "default" or (option.kind == "flag" and not option.env):
            continue
        value = getattr(settings, option.key)
        shown = "set" if option.secret else ("on" if value else "off") if option.kind == "flag" else _show(value)
        lines.append(f"{option.flag}: {shown} (from {sources[option.key]})")
    return lines


def _show(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return shlex.join(str(item) for item in value)
    return str(value)


def server_url(text: str) -> str:
    """A server's base URL: http(s), a host, maybe a path prefix; never a query or fragment (a token hides there)."""
    try:
        parts = urlsplit(text.strip())
    except ValueError as exc:  # "Invalid IPv6 URL": an unbalanced [ or ]
        raise ValueError(f"{exc}; give a server's base URL, e.g. http://[::1]:8000") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("give a server's base URL, e.g. http://host:8000")
    if "@" in parts.netloc:
        # httpx would send user:password as Basic auth in place of the API key, on every request: not echoed.
        raise ValueError(
            "a server's base URL takes no user:password@ (it would replace the API key on every request); give "
            "the key with --vllm-api-key"
        )
    if parts.query or parts.fragment:
        # Not echoed: a token may hide there.
        raise ValueError(
            f"a server's base URL takes no {'query string' if parts.query else 'fragment'}; give it without"
        )
    try:
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError as exc:
        raise ValueError(f"bad port: {exc}") from None
    return urlunsplit(parts._replace(path=parts.path.rstrip("/")))


def _masked_url(text: str) -> str:
    """A URL as an error may show it: no user:password, no query values."""
    try:
        parts = urlsplit(text.strip())
    except ValueError:  # an unbalanced "[" (urlsplit refuses it): cut what may hide a secret by hand
        scheme, _, rest = text.strip().rpartition("://")
        rest = rest.split("?", 1)[0].split("#", 1)[0]
        return (f"{scheme}://" if scheme else "") + ("***@" if "@" in rest else "") + rest.rsplit("@", 1)[-1]
    host = parts.netloc.rsplit("@", 1)[-1]
    shown = parts._replace(netloc=("***@" if "@" in parts.netloc else "") + host, query="..." if parts.query else "")
    return urlunsplit(shown)


def register(parser: pytest.Parser) -> None:
    group = parser.getgroup(GROUP, "vLLM conformance")
    for option in OPTIONS:
        fallbacks = []
        if option.env:
            fallbacks.append(f"env {option.env}")
        if option.has_ini:
            fallbacks.append(f"ini {option.dest}")
        if option.default not in (None, (), False):
            fallbacks.append(f"default {option.default}")
        help_text = option.described + (f" [{'; '.join(fallbacks)}]" if fallbacks else "")
        if option.kind == "flag":
            group.addoption(option.flag, action="store_true", default=False, dest=option.dest, help=help_text)
            if option.env:  # a setting, not an action like --vllm-list-contracts: CI may set it from outside
                parser.addini(option.dest, option.help, type="bool", default=False)
            continue
        group.addoption(
            option.flag,
            action="append" if option.kind in ("list", "urls") else "store",
            default=None,
            dest=option.dest,
            metavar=option.metavar,
            help=help_text,
        )
        ini_type: Literal["args", "string"] = "args" if option.kind in ("list", "urls") else "string"
        parser.addini(option.dest, option.help, type=ini_type)


def resolve(config: pytest.Config, environ: Mapping[str, str] | None = None) -> tuple[Settings, Sources]:
    """Every option's value, and where each came from: command line, environment, ini file or default."""
    environ = os.environ if environ is None else environ
    resolved = {option.key: _resolve_one(option, config, environ) for option in OPTIONS}
    settings = Settings(**{key: setting.value for key, setting in resolved.items()})
    return settings, {key: setting.source for key, setting in resolved.items()}


def resolved_alone(config: pytest.Config, key: str, environ: Mapping[str, str] | None = None) -> Any:
    """One option's value, or None where it is itself wrong: for the report of a run whose other options are."""
    option = next(option for option in OPTIONS if option.key == key)
    try:
        return _resolve_one(option, config, os.environ if environ is None else environ).value
    except pytest.UsageError:
        return None


def given(config: pytest.Config, environ: Mapping[str, str] | None = None) -> bool:
    """Whether the run sets any of the plugin's options (command line, environment or ini), however wrongly: a run
    that sets none is a guest's run (the plugin is installed in its venv), which the plugin leaves as it found it."""
    environ = os.environ if environ is None else environ
    for option in OPTIONS:
        if config.getoption(option.dest, None) not in (None, False):
            return True
        if option.env and environ.get(option.env):
            return True
        if option.has_ini and config.getini(option.dest):
            return True
    return False


def plugin_run(config: pytest.Config, environ: Mapping[str, str] | None = None) -> bool:
    """A run of the plugin's: it sets one of its options, or names its suites (``--pyargs
    pytest_vllm_conformance.suites``, the ``vllm-conformance`` command, a path into them). Any other run is a guest's
    in a venv where the plugin is installed, left as it would be without it."""
    return given(config, environ) or any(_names_our_suites(str(arg)) for arg in config.args)


def _names_our_suites(arg: str) -> bool:
    if arg.startswith("pytest_vllm_conformance"):
        return True
    home = suites_folder()
    try:
        path = Path(arg.split("::", 1)[0]).resolve()
    except (OSError, ValueError):
        return False
    return path == home or home in path.parents


def report_path(config: pytest.Config, environ: Mapping[str, str] | None = None) -> Path | None:
    """--vllm-report's file alone, for a run whose other options are wrong (its report names the error)."""
    path = resolved_alone(config, "report", environ)
    if not isinstance(path, Path) or path.suffix.lower() == ".md":
        return None
    return Path(os.path.abspath(path.expanduser()))  # not resolved: a link is written through, never replaced


def _resolve_one(option: Option, config: pytest.Config, environ: Mapping[str, str]) -> Setting:
    if option.kind == "flag":
        return _resolve_flag(option, config, environ)
    cli = config.getoption(option.dest)
    if cli is not None:
        return Setting(_convert(option, cli, "cli"), "cli")
    if option.env and environ.get(option.env):
        raw = environ[option.env]
        return Setting(_convert(option, _env_value(option, raw), "env"), "env")
    ini = config.getini(option.dest)
    if ini:
        return Setting(_convert(option, ini, "ini"), "ini")
    return Setting(option.default, "default")


def _env_value(option: Option, raw: str) -> Any:
    if option.kind == "list":
        return shlex.split(raw)
    if option.kind == "urls":
        return raw.replace(",", " ").split()
    return raw


TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off", "")


def _resolve_flag(option: Option, config: pytest.Config, environ: Mapping[str, str]) -> Setting:
    """A flag on the command line wins; else its environment variable (1/true/yes/on or 0/false/no/off); else ini."""
    if config.getoption(option.dest):
        return Setting(True, "cli")
    if option.env and option.env in environ:
        word = environ[option.env].strip().lower()
        if word not in TRUE_WORDS + FALSE_WORDS:
            raise pytest.UsageError(
                f"{option.flag} (from env {option.env}): {environ[option.env]!r} is not valid: "
                f"use one of {', '.join(TRUE_WORDS)} or {', '.join(w for w in FALSE_WORDS if w)}"
            )
        return Setting(word in TRUE_WORDS, "env")
    if option.env and config.getini(option.dest):
        return Setting(True, "ini")
    return Setting(False, "default")


def _number(option: Option, raw: Any) -> int | float:
    """A number option's value: finite, positive and at most its maximum (a NaN or an infinite timeout never ends)."""
    number: int | float = int(raw) if option.kind == "int" else float(raw)
    if not math.isfinite(number):
        raise ValueError("must be a finite number")
    if number <= 0:
        raise ValueError("must be positive")
    if option.maximum is not None and number > option.maximum:
        raise ValueError(
            f"must be at most {option.maximum:g}"
            if option.kind == "float"
            else f"must be at most {int(option.maximum)}"
        )
    return number


def _convert(option: Option, raw: Any, source: Source) -> Any:
    where = {"cli": option.flag, "env": f"env {option.env}", "ini": f"ini {option.dest}"}[source]
    try:
        if option.kind in ("int", "float"):
            return _number(option, raw)
        if option.kind == "path":
            return Path(raw).expanduser()
        if option.kind == "list":
            return tuple(raw)
        if option.kind == "version":
            return Version(str(raw))  # InvalidVersion is a ValueError: a usage error below
        if option.kind == "choice" and raw not in option.choices:
            raise ValueError(f"choose one of {', '.join(option.choices)}")
        if option.kind == "url":
            return server_url(str(raw))
        if option.kind == "urls":
            # Each item may itself be a comma separated list (an ini line, a CI variable).
            items = [part for item in raw for part in str(item).replace(",", " ").split()]
            return tuple(server_url(item) for item in items)
        if option.secret:
            raw = key_line(str(raw))
    except ValueError as exc:
        shown = "***" if option.secret else repr(_masked_url(str(raw)) if option.kind == "url" else raw)
        if option.kind == "urls":
            shown = repr(", ".join(_masked_url(str(item)) for item in raw))
        raise pytest.UsageError(f"{option.flag} (from {where}): {shown} is not valid: {exc}") from None
    if option.secret:
        if len(str(raw).strip()) < option.min_chars:
            raise pytest.UsageError(
                f"{option.flag} (from {where}): a key of {len(str(raw).strip())} character(s) is refused: "
                f"a key shorter than {option.min_chars} characters cannot be masked in output without masking "
                "ordinary words; give the server a longer one"
            )
        return Secret(str(raw))
    return str(raw)
