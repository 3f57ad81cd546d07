"""Every reader of a user's file, and every option parser, fed what Hypothesis generates.

Shared by the short CI run (tests/unit/test_reader_fuzz.py) and the long one
(bench/fuzz_readers.py). Each reader must either read its input or refuse it
with its own error, whose first line names the file; anything else (a
KeyError, a UnicodeDecodeError, a RecursionError: what pytest shows as
INTERNALERROR, or the merge as a traceback) is a finding. Each input must
also be judged within a memory bound: the YAML alias bomb took 2.29 GB.
"""

from __future__ import annotations

import json
import tempfile
import tracemalloc
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import strategies as st

from pytest_vllm_conformance.catalogue.serving_profile import ProfileError, load_profile
from pytest_vllm_conformance.connection import fleet
from pytest_vllm_conformance.features.quality import baseline_file as quality_file
from pytest_vllm_conformance.features.serving import baseline_file as perf_file
from pytest_vllm_conformance.plugin import options
from pytest_vllm_conformance.plugin.option_table import OPTIONS, Option
from pytest_vllm_conformance.reporting import merge, report_files
from pytest_vllm_conformance.reporting.outcomes import ContractTest, feature_results
from pytest_vllm_conformance.reporting.redaction import Redactor

REPO = Path(__file__).resolve().parents[2]
MEMORY_BOUND = 64 * 1024 * 1024


def _shard_seed() -> str:
    tests = [ContractTest("t.py::test_a", "discovery.version_parses", "discovery", "passed")]
    tests.append(ContractTest("t.py::test_b", "discovery.max_model_len_published", "discovery", "failed"))
    tests[1].reason = "the model's length is not published"
    run = report_files.RunInfo(started=datetime(2026, 12, 4, tzinfo=UTC), plugin_version="0.1.0", url="http://a:8000")
    report = report_files.build(run, feature_results({"discovery": "answers"}, tests), Redactor())
    return report_files.render_yaml(report)


# name -> (a valid input to mutate, the reader, the one error it may refuse with)
READERS: dict[str, tuple[str, Callable[[Path], Any], type[Exception]]] = {
    "profile": ((REPO / "docs" / "sample-profile.yaml").read_text(), load_profile, ProfileError),
    "fleet": (
        "replicas:\n  - url: http://10.0.0.1:8000\n    name: a\n    labels: {zone: x}\n  - url: http://b:8000\n",
        lambda path: fleet.load_fleet_file(path, options.server_url),
        fleet.FleetError,
    ),
    "perf baseline": (
        json.dumps(
            {
                "format": perf_file.FORMAT,
                "format_version": perf_file.FORMAT_VERSION,
                "server": {"vllm_version": "0.32.0", "model": "m"},
                "workload": {"prompt_tokens": 16},
                "rounds": [],
            }
        ),
        perf_file.PerfRecording.load,
        perf_file.PerfFileError,
    ),
    "quality baseline": (
        json.dumps(
            {"format": quality_file.FORMAT, "format_version": max(quality_file.READABLE_VERSIONS), "server": {}}
        ),
        quality_file.BaselineFile.load,
        quality_file.BaselineFileError,
    ),
    "shard": (_shard_seed(), lambda path: merge.merge([merge.load(path)]), merge.MergeRefused),
    # Beside a valid shard of another replica: the set's checks, the replicas' comparison.
    "shard beside another": (_shard_seed(), lambda path: _beside_another(path), merge.MergeRefused),
}


def _beside_another(path: Path) -> Any:
    from pytest_vllm_conformance.plugin.cli import compare_replicas

    other = path.with_name("other.yaml")
    other.write_text(_shard_seed().replace("http://a:8000", "http://b:8000"))
    return merge.merge([merge.load(other), merge.load(path)], compare_replicas)


def _alias_bomb(levels: int) -> str:
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


def file_contents(seed: str) -> st.SearchStrategy[bytes]:
    """The seed cut short, spliced with junk or with a piece of itself, an alias bomb, deep nesting, random bytes;
    each encoded as UTF-8 (with and without a BOM), UTF-16, UTF-32 or Latin-1."""
    at = st.integers(0, len(seed))
    texts = st.one_of(
        st.just(seed),
        st.builds(lambda cut: seed[:cut], at),
        st.builds(lambda i, junk: seed[:i] + junk + seed[i:], at, st.text(max_size=12)),
        st.builds(lambda i, j: seed[: min(i, j)] + seed[max(i, j) :], at, at),
        st.builds(lambda i, j, k: seed[:k] + seed[min(i, j) : max(i, j)] + seed[k:], at, at, at),
        st.builds(_alias_bomb, st.integers(1, 9)),
        st.builds(lambda n, open_: open_ * n, st.integers(1, 5000), st.sampled_from(["[", "{a: ", "- "])),
    )
    encodings = st.sampled_from(["utf-8", "utf-8", "utf-8-sig", "utf-16", "utf-32", "latin-1"])
    encoded = st.builds(lambda text, encoding: text.encode(encoding, errors="replace"), texts, encodings)
    return st.one_of(encoded, st.binary(max_size=256))


class Finding(AssertionError):
    """A reader answered an input with something other than its own refusal."""


def _bounded(call: Callable[[], Any]) -> Any:
    tracemalloc.start()
    try:
        return call()
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        if peak > MEMORY_BOUND:
            raise Finding(f"took {peak // (1024 * 1024)} MB (bound: {MEMORY_BOUND // (1024 * 1024)} MB)")


def read(name: str, content: bytes) -> str:
    """``content`` through the reader ``name``: "read" or "refused"; a Finding otherwise."""
    _, reader, refusal = READERS[name]
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "given.yaml"
        path.write_bytes(content)
        try:
            _bounded(lambda: reader(path))
        except refusal as exc:
            first = str(exc).splitlines()[0] if str(exc) else ""
            if str(path) not in first or "Traceback" in str(exc):
                raise Finding(f"{name}: the refusal does not name the file in its first line: {exc}") from None
            return "refused"
        except Finding:
            raise
        except Exception as exc:  # what pytest would show as INTERNALERROR, the merge as a traceback
            raise Finding(f"{name}: {type(exc).__name__}: {exc}") from exc
    return "read"


def option_values(option: Option) -> st.SearchStrategy[Any]:
    words = st.one_of(
        st.text(max_size=40),
        st.sampled_from(["nan", "inf", "-inf", "1e309", "0", "-1", "9" * 5000, "http://[::1", "http://u:p@h:99999"]),
        st.from_regex(r"\Ahttps?://[a-z0-9.:\[\]@%?#/-]{0,30}\Z"),
    )
    return st.lists(words, min_size=1, max_size=3) if option.kind in ("list", "urls") else words


def parse(option: Option, raw: Any) -> str:
    """An option's value through its parser: "read" or "refused" (one usage-error line); a Finding otherwise."""
    try:
        _bounded(lambda: options._convert(option, raw, "cli"))
    except pytest.UsageError as exc:
        if len(str(exc).splitlines()) != 1 or not str(exc).startswith(option.flag):
            raise Finding(f"{option.flag}: not one line naming the option: {exc}") from None
        return "refused"
    except Exception as exc:
        raise Finding(f"{option.flag} {raw!r}: {type(exc).__name__}: {exc}") from exc
    return "read"


VALUE_OPTIONS = [option for option in OPTIONS if option.kind != "flag"]
