"""A marker expression (``-m``) that names nothing real is refused, naming the word.

``-m "scale_ot or discovery"`` would otherwise run discovery alone and call the run a success with scale_out
``not run``; ``-m nosuchmarker`` would deselect every test. pytest only warns of an unknown marker where a test
uses one (``--strict-markers``), never in ``-m``. Only a run of ours is checked: a guest's run is pytest's.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable

import pytest

# pytest's expression keywords, and the markers pytest itself defines (always known, registered or not).
_KEYWORDS = frozenset({"and", "or", "not", "True", "False", "None"})
# An identifier as pytest's -m lexer reads one; a marker's keyword arguments in parentheses are not markers.
_IDENTIFIER = re.compile(r"(?:\w|:|\+|-|\.|\[|\]|\\|/)+")
_WITH_ARGUMENTS = re.compile(rf"({_IDENTIFIER.pattern})\s*\([^()]*\)")


def marker_words(expression: str) -> list[str]:
    """The marker names ``expression`` tests, in order, each once."""
    bare = _WITH_ARGUMENTS.sub(lambda m: m.group(0) if m.group(1) in _KEYWORDS else f"{m.group(1)} ", expression)
    words = _IDENTIFIER.findall(bare)
    return list(dict.fromkeys(word for word in words if word not in _KEYWORDS))


def registered_markers(config: pytest.Config) -> set[str]:
    """Every marker the run knows: registered in an ini file or by a plugin (ours: each feature)."""
    names = set()
    for line in config.getini("markers"):
        names.add(line.split(":", 1)[0].split("(", 1)[0].strip())
    return names


def check(config: pytest.Config, used: Iterable[str] = ()) -> None:
    """A usage error for the first word of ``-m`` that is neither a registered marker nor one a test uses."""
    expression = getattr(config.option, "markexpr", "") or ""
    if not expression.strip():
        return
    known = registered_markers(config) | set(used)
    for word in marker_words(expression):
        if word in known:
            continue
        close = difflib.get_close_matches(word, sorted(known), n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise pytest.UsageError(
            f"-m {expression!r}: {word!r} is neither a feature nor a registered marker{hint}; "
            "`pytest --markers` lists them"
        )
