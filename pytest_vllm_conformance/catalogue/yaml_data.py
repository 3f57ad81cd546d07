"""The package's own YAML files (catalogue, deprecation rules, task templates), read with libyaml.

Every run parses the contract catalogue (27 KB) and the deprecation rules at
start-up; PyYAML's pure-Python parser spends about 50 ms on the catalogue
alone, libyaml about 5 ms. Users' files (profiles, deployment manifests) keep
the pure parser: its errors quote the offending line with a caret, libyaml's
only name the position.
"""

from __future__ import annotations

from typing import Any

import yaml

_SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_shipped(text: str) -> Any:
    return yaml.load(text, Loader=_SafeLoader)
