"""Shards' JUnit files into one: every test case once, the counts recomputed.

Each shard's file is the one the plugin rewrote (``junit.py``). The merged
file has one ``<testsuite>`` holding every shard's test cases; a case met
twice (by class name and name) is kept once when both ended the same way,
and refused when they did not, naming the file.
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path

from pytest_vllm_conformance.reporting.report_files import write_output

_VERDICTS = ("failure", "error", "skipped")


class MergeRefused(Exception):
    """The shards cannot make one report (or one JUnit file); the message names the file."""


def _verdict(case: ET.Element) -> str:
    return next((tag for tag in _VERDICTS if case.find(tag) is not None), "passed")


def _seconds(case: ET.Element) -> float:
    """A case's time; one that is not a finite number (an edited file) counts as none rather than stopping the merge."""
    try:
        seconds = float(case.get("time") or 0)
    except ValueError:
        return 0.0
    return seconds if math.isfinite(seconds) else 0.0


def merge_files(paths: Sequence[Path], output: Path) -> None:
    cases: dict[tuple[str, str], tuple[ET.Element, Path]] = {}
    properties: dict[str, str] = {}
    name, timestamp = "pytest", None
    for path in paths:
        try:
            root = ET.parse(path).getroot()
        except (OSError, ET.ParseError) as exc:
            raise MergeRefused(f"{path}: cannot be read as a JUnit file: {exc}") from None
        suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
        for suite in suites:
            name = suite.get("name", name)
            stamp = suite.get("timestamp")
            timestamp = min(filter(None, (timestamp, stamp)), default=None)
            for prop in suite.findall("properties/property"):
                properties.setdefault(prop.get("name") or "", prop.get("value") or "")
            for case in suite.findall("testcase"):
                key = (case.get("classname", ""), case.get("name", ""))
                seen = cases.get(key)
                if seen is None:
                    cases[key] = (case, path)
                elif _verdict(seen[0]) != _verdict(case):
                    raise MergeRefused(
                        f"{path}: {'::'.join(key)} {_verdict(case)}, but {seen[1]} has it {_verdict(seen[0])}"
                    )
    suite = ET.Element("testsuite", name=name)
    if properties:
        holder = ET.SubElement(suite, "properties")
        for prop_name, value in properties.items():
            ET.SubElement(holder, "property", name=prop_name, value=value)
    verdicts = [_verdict(case) for case, _ in cases.values()]
    suite.set("errors", str(verdicts.count("error")))
    suite.set("failures", str(verdicts.count("failure")))
    suite.set("skipped", str(verdicts.count("skipped")))
    suite.set("tests", str(len(cases)))
    suite.set("time", f"{sum(_seconds(case) for case, _ in cases.values()):.3f}")
    if timestamp:
        suite.set("timestamp", timestamp)
    for case, _ in cases.values():
        suite.append(case)
    root = ET.Element("testsuites")
    root.append(suite)
    # What -o names is written, never replaced: a device stays a device, a link stays a link.
    write_output(output, '<?xml version="1.0" encoding="utf-8"?>' + ET.tostring(root, encoding="unicode"))
