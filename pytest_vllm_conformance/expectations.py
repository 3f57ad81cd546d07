"""What the server under test is expected to do, and why.

An expectation is the profile's declaration when there is one, else the
documented default of the detected vLLM version. Each value carries its
basis, so a failure can say "expected 403 (vLLM 0.32 default)" or
"expected enabled (profile canary-tiny)".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from packaging.version import Version

from .contracts import Catalogue
from .serving_profile import Profile


@dataclass(frozen=True)
class Expectation:
    value: Any
    basis: str

    def __str__(self) -> str:
        return f"{self.value} ({self.basis})"


class Expectations:
    def __init__(
        self, catalogue: Catalogue, version: Version | None, profile: Profile | None, baseline: Profile | None = None
    ) -> None:
        self.catalogue = catalogue
        self.version = version
        self.profile = profile
        # A captured profile (--vllm-baseline): what the server was, consulted only where a suite asks.
        self.baseline = baseline

    @property
    def version_label(self) -> str:
        return f"vLLM {self.version}" if self.version else "vLLM (version unknown: newest known rules)"

    @property
    def basis(self) -> str:
        """One line for the report header."""
        if self.profile:
            where = f" ({self.profile.path})" if self.profile.path else ""
            return f"profile {self.profile.name}{where}, else {self.version_label} defaults"
        return f"{self.version_label} documented defaults (no --vllm-profile given)"

    def fact(self, name: str) -> Any:
        return self.catalogue.fact(name, self.version)

    def declared(
        self,
        section: str,
        key: str,
        *,
        default_fact: str | None = None,
        default: Any = None,
        from_baseline: bool = False,
    ) -> Expectation:
        """The profile's value, else the baseline's (when asked), else a version fact, else a plain default."""
        if self.profile is not None:
            value = self.profile.get(section, key)
            if value is not None:
                return Expectation(value, f"profile {self.profile.name}")
        if from_baseline and self.baseline is not None:
            value = self.baseline.get(section, key)
            if value is not None:
                return Expectation(value, f"baseline {self.baseline.path}")
        if default_fact is not None:
            return Expectation(self.fact(default_fact), f"{self.version_label} default")
        return Expectation(default, "plugin default")
