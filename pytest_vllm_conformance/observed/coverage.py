"""What a comparison with a baseline covered: the models on both sides, and each aspect compared, ignored or not.

``profile_diff.baseline_compared`` records it and fails a comparison that
compared nothing of the model under test (a baseline of another model).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from pytest_vllm_conformance.observed.diff import ASPECT_OF, Observed, not_compared


@dataclass(frozen=True)
class Coverage:
    """What a comparison covered: the model ids each side serves, and each aspect's fate."""

    models: tuple[tuple[str, ...], tuple[str, ...]]  # (the baseline's, the target's)
    aspects: Mapping[str, str]  # aspect -> "compared", "ignored" or "not compared"

    def summary(self) -> str:
        fates = {
            fate: [a for a, f in self.aspects.items() if f == fate] for fate in dict.fromkeys(self.aspects.values())
        }
        both = sorted(set(self.models[0]) & set(self.models[1]))
        return "; ".join(
            [f"models in both: {', '.join(both) or 'none'}"] + [f"{f}: {', '.join(a)}" for f, a in fates.items()]
        )

    def problem(self) -> str | None:
        """Why nothing of the model under test was compared, or None: the model-bound aspects (max_model_len, and
        the tokenizer, defaults and wire fields captured on one model) say nothing across two models."""
        if set(self.models[0]) & set(self.models[1]):
            return None
        return (
            f"the baseline and the target share no model (baseline {list(self.models[0]) or 'none'}, target "
            f"{list(self.models[1])}): max_model_len was compared for none, and the tokenizer, generation defaults "
            "and wire fields of one model were held against another's; capture the baseline on a server of the same "
            "model id"
        )


def coverage(baseline: Observed, target: Observed, ignore: Iterable[str] = ()) -> Coverage:
    """What ``differences`` compares for these two observations."""
    ids = [
        tuple(sorted({str(c.get("id")) for c in o.get("models") or [] if isinstance(c, Mapping)}))
        for o in (baseline, target)
    ]
    aspects = {
        aspect: "ignored"
        if aspect in ignore
        else "not compared"
        if not_compared(baseline, target, aspect)
        else "compared"
        for aspect in ASPECT_OF.values()
    }
    return Coverage((ids[0], ids[1]), aspects)
