"""Lint deployment files for what the target vLLM version removed, deprecated or never had.

Kubernetes manifests, Helm values and templates, ``.env`` files,
Dockerfiles and shell scripts all spell a deployment the same way: a
``VLLM_*`` variable, a ``--flag`` of ``vllm serve``, a ``vllm.entrypoints``
module. So every file is scanned as text, line by line (which gives
file:line for free and reads Helm templates that are not YAML), with
comments left out; each file is also parsed by its own format, and a file
that cannot be read or parsed is reported, never allowed to stop the run.
The rules are data: ``deprecations.yaml`` beside this module.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

import yaml
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from pytest_vllm_conformance.catalogue import yaml_data
from pytest_vllm_conformance.catalogue.cases import CaseContext, NoCases

RULES_FILE = "deprecations.yaml"
MAX_FILE_BYTES = 5 * 1024 * 1024
SKIPPED_DIRS = frozenset({".git", ".hg", ".svn", "node_modules", "__pycache__", ".venv", "venv", ".tox"})
KIND_WORDS = {"env": "environment variable", "flag": "flag", "entrypoint": "module"}
STATE_WORDS = {
    "removed": "not in vLLM {version}",
    "deprecated": "deprecated in vLLM {version}",
    "unknown": "not a vLLM {kind} in any release",
    "not_yet": "not in vLLM {version} yet",
}

# What a name looks like in each kind; lookarounds keep VLLM_FOO out of VLLM_FOO_BAR,
# --flag out of --flag-x, and vllm.entrypoints.launcher out of ...launchers.
ENV_NAME = re.compile(r"(?<![A-Za-z0-9_])VLLM_[A-Z0-9_]+(?![A-Za-z0-9_])")
FLAG_NAME = re.compile(r"(?<![\w-])--[A-Za-z0-9][\w-]*")
MODULE_NAME = re.compile(r"(?<![\w.])vllm(?:[./][A-Za-z_]\w*)+")
DOCKER_INSTRUCTIONS = ("FROM", "ARG")
ENV_ASSIGNMENT = re.compile(r"^\s*(?:export\s+)?[A-Za-z_][A-Za-z0-9_]*\s*=")


# ---- the rules ------------------------------------------------------------------


@dataclass(frozen=True)
class State:
    versions: SpecifierSet
    state: str
    replacement: str | None
    note: str | None
    says: str | None


@dataclass(frozen=True)
class Rule:
    kind: str
    name: str
    states: tuple[State, ...]

    def state_for(self, version: Version) -> State | None:
        for state in self.states:
            if state.versions.contains(version, prereleases=True):
                return state
        return None


@dataclass(frozen=True)
class Rules:
    effects: dict[str, dict[str, str]]
    by_kind: dict[str, dict[str, Rule]]


@cache
def load_rules() -> Rules:
    raw = yaml_data.load_shipped(resources.files(__package__).joinpath(RULES_FILE).read_text())
    by_kind: dict[str, dict[str, Rule]] = {}
    for kind in KIND_WORDS:
        rules = {}
        for entry in raw.get(kind, []):
            states = tuple(
                State(
                    versions=SpecifierSet(item["versions"]),
                    state=item["state"],
                    replacement=item.get("replacement", entry.get("replacement")),
                    note=item.get("note"),
                    says=item.get("says"),
                )
                for item in entry["states"]
            )
            rules[_normal(kind, entry["name"])] = Rule(kind, entry["name"], states)
        by_kind[kind] = rules
    return Rules(effects=raw["effects"], by_kind=by_kind)


def _normal(kind: str, name: str) -> str:
    # vLLM's argument parser reads --max_num_seqs as --max-num-seqs.
    return name.replace("_", "-") if kind == "flag" else name


# ---- the files --------------------------------------------------------------------


@dataclass(frozen=True)
class DeploymentFile:
    """A file to lint; ``id`` is its path relative to --vllm-manifests."""

    path: Path
    id: str
    # Why a directory under --vllm-manifests could not be listed, when it could not.
    unlisted: str | None = None

    def __str__(self) -> str:
        return self.id

    @property
    def format(self) -> str | None:
        return file_format(self.path)


def file_format(path: Path) -> str | None:
    """yaml, json, env, dockerfile, shell or template (Helm ``.tpl``); None for any other file."""
    name = path.name.lower()
    if name.endswith((".yaml", ".yml")):
        return "yaml"
    if name.endswith(".json"):
        return "json"
    if name == ".env" or name.startswith(".env.") or name.endswith(".env"):
        return "env"
    if name in ("dockerfile", "containerfile") or name.startswith(("dockerfile.", "containerfile.")):
        return "dockerfile"
    if name.endswith(".dockerfile"):
        return "dockerfile"
    if name.endswith((".sh", ".bash")):
        return "shell"
    if name.endswith(".tpl"):
        return "template"
    return None


def deployment_files(root: Path) -> list[DeploymentFile]:
    """Every deployment file under ``root`` (or ``root`` itself), sorted; unreadable ones included."""
    root = Path(root)
    if not root.is_dir():
        return [DeploymentFile(root, root.name)]
    found = []

    def unlisted(error: OSError) -> None:
        path = Path(error.filename)
        found.append(DeploymentFile(path, path.relative_to(root).as_posix(), error.strerror or str(error)))

    for directory, subdirs, files in os.walk(root, onerror=unlisted):
        subdirs[:] = sorted(d for d in subdirs if d not in SKIPPED_DIRS)
        for name in files:
            path = Path(directory, name)
            if file_format(path) is not None:
                found.append(DeploymentFile(path, path.relative_to(root).as_posix()))
    return sorted(found, key=lambda file: file.id)


# ---- the lint ---------------------------------------------------------------------


@dataclass(frozen=True)
class Finding:
    file: str
    line: int
    kind: str
    name: str
    state: State
    effect: str
    version: Version

    def describe(self) -> str:
        """``file:line: flag --x: deprecated in vLLM 0.32.0; use --y instead``, then why, indented."""
        kind_word = KIND_WORDS[self.kind]
        what = STATE_WORDS[self.state.state].format(version=self.version, kind=kind_word)
        fix = f"use {self.state.replacement} instead" if self.state.replacement else "remove it"
        lines = [f"{self.file}:{self.line}: {kind_word} {self.name}: {what}; {fix}"]
        if self.state.note:
            lines.append(f"    {self.state.note}")
        lines.append(f"    effect: {self.effect}")
        if self.state.says:
            lines.append(f'    vLLM says: "{self.state.says}"')
        return "\n".join(lines)


@dataclass(frozen=True)
class FileLint:
    file: DeploymentFile
    text: str | None
    problem: str | None
    findings: tuple[Finding, ...]
    # Why the file's format could not be checked here (no bash, a template that is YAML only once rendered).
    unchecked: str | None = None

    def of_kind(self, kind: str) -> list[Finding]:
        return [finding for finding in self.findings if finding.kind == kind]


class Linter:
    """The rules for one target version, applied to one file at a time (each file read once)."""

    def __init__(self, rules: Rules, version: Version) -> None:
        self.rules = rules
        self.version = version
        self._done: dict[Path, FileLint] = {}

    def lint(self, file: DeploymentFile) -> FileLint:
        if file.path not in self._done:
            self._done[file.path] = self._lint(file)
        return self._done[file.path]

    def _lint(self, file: DeploymentFile) -> FileLint:
        text, problem = read_text(file)
        if text is None:
            return FileLint(file, None, problem, ())
        problem, unchecked = parse_problem(file, text)
        return FileLint(file, text, problem, tuple(self._scan(file, text)), unchecked)

    def _scan(self, file: DeploymentFile, text: str) -> Iterator[Finding]:
        for number, line in enumerate(text.splitlines(), start=1):
            code = strip_comment(line, file.format)
            seen = set()
            for kind, candidates in names_in(code):
                rules = self.rules.by_kind[kind]
                rule = next((rules[_normal(kind, c)] for c in candidates if _normal(kind, c) in rules), None)
                state = rule.state_for(self.version) if rule else None
                if rule is None or state is None or (kind, rule.name) in seen:
                    continue
                seen.add((kind, rule.name))
                effect = self.rules.effects[kind][state.state]
                yield Finding(file.id, number, kind, rule.name, state, effect, self.version)


def names_in(code: str) -> Iterator[tuple[str, tuple[str, ...]]]:
    """Each name on the line, as (kind, the spellings a rule may know it by, longest first)."""
    for match in ENV_NAME.finditer(code):
        yield "env", (match.group(0),)
    for match in FLAG_NAME.finditer(code):
        yield "flag", (match.group(0),)
    for match in MODULE_NAME.finditer(code):
        # A module is named by itself or by anything inside it (module.main, module:app, module.py).
        parts = match.group(0).replace("/", ".").removesuffix(".py").split(".")
        yield "entrypoint", tuple(".".join(parts[:end]) for end in range(len(parts), 1, -1))


def strip_comment(line: str, file_format: str | None) -> str:
    """The line without its comment: a ``#`` at the start or after a blank, outside quotes."""
    if file_format == "json":
        return line
    quote = None
    for index, char in enumerate(line):
        if quote:
            if char == quote:
                quote = None
        elif char in "'\"" and (index == 0 or not line[index - 1].isalnum()):
            quote = char
        elif char == "#" and (index == 0 or line[index - 1].isspace()):
            return line[:index]
    return line


def read_text(file: DeploymentFile) -> tuple[str | None, str | None]:
    if file.unlisted:
        return None, f"{file.id}: cannot list this directory: {file.unlisted}"
    try:
        size = file.path.stat().st_size
        if size > MAX_FILE_BYTES:
            return None, f"{file.id}: too large to lint ({size:,} bytes, the limit is {MAX_FILE_BYTES:,})"
        data = file.path.read_bytes()
    except OSError as exc:
        return None, f"{file.id}: cannot read it: {exc.strerror or exc}"
    if b"\0" in data:
        return None, f"{file.id}: not a text file (it holds NUL bytes)"
    try:
        return data.decode("utf-8-sig"), None  # a byte-order mark (Notepad's) is still UTF-8
    except UnicodeDecodeError as exc:
        return None, f"{file.id}: not UTF-8 text (byte {exc.start})"


def parse_problem(file: DeploymentFile, text: str) -> tuple[str | None, str | None]:
    """(why the file does not parse in its own format, with its line; why it could not be checked here)."""
    kind = file.format
    if kind == "yaml" and "{{" in text:
        # A Helm template is YAML only once rendered: with its actions blanked it still must be.
        if _yaml_problem(file, blank_helm_actions(text)) is None:
            return None, None
        return None, (
            f"{file.id}: a Helm template that is not YAML even with its template actions blanked; "
            "render it (helm template ...) and lint the output"
        )
    if kind == "yaml":
        return _yaml_problem(file, text), None
    if kind == "json":
        try:
            json.loads(text)
        except ValueError as exc:
            return f"{file.id}:{getattr(exc, 'lineno', '?')}: not valid JSON: {getattr(exc, 'msg', exc)}", None
    if kind == "env":
        for number, line in enumerate(text.splitlines(), start=1):
            if line.strip() and not line.lstrip().startswith("#") and not ENV_ASSIGNMENT.match(line):
                return f"{file.id}:{number}: not a KEY=VALUE line: {line.strip()[:80]!r}", None
    if kind == "dockerfile":
        return _dockerfile_problem(file, text), None
    if kind == "shell":
        return _shell_problem(file)
    return None, None


HELM_ACTION = re.compile(r"\{\{.*?\}\}", re.DOTALL)
HELM_CONTROL_LINE = re.compile(
    r"^\s*\{\{-?\s*(?:/\*.*\*/|(?:if|else|end|range|with|define|template|block)\b.*?)\s*-?\}\}\s*$"
)


def blank_helm_actions(text: str) -> str:
    """Control lines (if, range, end...) dropped, every other ``{{ ... }}`` a plain scalar; line numbers kept."""
    lines = ["" if HELM_CONTROL_LINE.match(line) else line for line in text.split("\n")]
    return HELM_ACTION.sub("helm-value", "\n".join(lines))


def _yaml_problem(file: DeploymentFile, text: str) -> str | None:
    try:
        # Composed, not constructed: a manifest's aliases (compose files use them) stay references to one node,
        # so a kilobyte of nested aliases cannot expand to gigabytes here.
        for _ in yaml.compose_all(text, Loader=yaml.SafeLoader):
            pass
    except RecursionError:
        return f"{file.id}: not valid YAML: nested too deep to read"
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{file.id}:{mark.line + 1}" if mark is not None else file.id
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        return f"{where}: not valid YAML: {problem}"
    return None


def _dockerfile_problem(file: DeploymentFile, text: str) -> str | None:
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        word = stripped.split(None, 1)[0].upper()
        if word not in DOCKER_INSTRUCTIONS:
            return f"{file.id}:{number}: a Dockerfile must start with FROM (or ARG), not {word}"
        return None
    return f"{file.id}: an empty Dockerfile"


def _shell_problem(file: DeploymentFile) -> tuple[str | None, str | None]:
    """``bash -n`` reads the script without running any of it; without bash it cannot be checked."""
    bash = shutil.which("bash")
    if bash is None:
        return None, f"{file.id}: no bash on this machine to check the script with (bash -n)"
    try:
        result = subprocess.run([bash, "-n", str(file.path)], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"{file.id}: bash -n could not check it: {exc}"
    if result.returncode == 0:
        return None, None
    first = (result.stderr.strip().splitlines() or ["syntax error"])[0]
    line = re.search(r"line (\d+)", first)
    detail = first.split(": ", 2)[-1]
    return f"{file.id}:{line.group(1) if line else '?'}: not valid shell: {detail}", None


def describe_all(findings: list[Finding]) -> str:
    return "\n".join(finding.describe() for finding in findings)


def deployment_file_cases(ctx: CaseContext) -> list[DeploymentFile]:
    """Every deployment file under --vllm-manifests."""
    settings = ctx.settings
    if not settings.manifests:
        raise NoCases("no deployment files given (--vllm-manifests=DIR)")
    files = deployment_files(settings.manifests)
    if not files:
        raise NoCases(f"no deployment files (YAML, JSON, .env, Dockerfile, shell) under {settings.manifests}")
    return files
