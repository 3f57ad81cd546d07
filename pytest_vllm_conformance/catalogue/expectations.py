"""What the server under test is expected to do, and why.

An expectation is the profile's declaration when there is one, else what
the catalogue's ``declarations`` say the key defaults to: the detected vLLM
version's documented default, the baseline's value, or the plugin's own
policy. Each value carries its basis, so a failure can say "expected 403
(vLLM 0.32 default)", "expected enabled (profile canary-tiny)" or "public
routes [...] (plugin policy)", never calling the plugin's choice vLLM's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from packaging.version import Version

from pytest_vllm_conformance.catalogue.contracts import Catalogue, Departure
from pytest_vllm_conformance.catalogue.release_facts import ReleaseFacts
from pytest_vllm_conformance.catalogue.serving_profile import Profile

PLUGIN_POLICY = "plugin policy"


@dataclass(frozen=True)
class Expectation:
    value: Any
    basis: str

    def __str__(self) -> str:
        return f"{self.value} ({self.basis})"

    @property
    def from_profile(self) -> bool:
        return self.basis.startswith("profile ")


class Expectations:
    def __init__(
        self, catalogue: Catalogue, version: Version | None, profile: Profile | None, baseline: Profile | None = None
    ) -> None:
        self.catalogue = catalogue
        self.version = version
        self.profile = profile
        # A captured profile (--vllm-baseline): what the server was, consulted for keys whose declaration says so.
        self.baseline = baseline

    @property
    def version_label(self) -> str:
        return f"vLLM {self.version}" if self.version else "vLLM (version unknown: newest known rules)"

    @property
    def basis(self) -> str:
        """One line for the report header."""
        if self.profile:
            where = f" ({self.profile.path})" if self.profile.path else ""
            return f"profile {self.profile.name}{where}, else {self.version_label} defaults and plugin policy"
        return f"{self.version_label} documented defaults and plugin policy (no --vllm-profile given)"

    def fact(self, name: str) -> Any:
        return self.catalogue.fact(name, self.version)

    def departure(self, name: str) -> Departure | None:
        """The release's known departure on fact ``name`` (its value is not what clients need), else None."""
        return self.catalogue.departure(name, self.version)

    @property
    def release(self) -> ReleaseFacts:
        """The facts the suites read, typed (``release.scale_out_gate`` is ``fact("scale_out_gate")``)."""
        return ReleaseFacts(self.fact)

    def setting(self, option: Any, option_name: str, section: str, key: str) -> Expectation:
        """An option (command line, env, ini) over the profile's value, over its default; the basis says which."""
        if option is not None:
            return Expectation(option, f"option {option_name}")
        return self.declared(section, key)

    def declared(self, section: str, key: str) -> Expectation:
        """The profile's value, else the default its declaration names (version fact, baseline, plugin policy)."""
        if self.profile is not None:
            value = self.profile.get(section, key)
            if value is not None:
                return Expectation(value, f"profile {self.profile.name}")
        declaration = self.catalogue.declaration(f"{section}.{key}")
        if declaration.from_baseline and self.baseline is not None:
            value = self.baseline.get(section, key)
            if value is not None:
                return Expectation(value, f"baseline {self.baseline.path}")
        if declaration.fact is not None:
            return Expectation(self.fact(declaration.fact), f"{self.version_label} default")
        if declaration.has_policy:
            return Expectation(declaration.policy, PLUGIN_POLICY)
        return Expectation(None, "not declared")
