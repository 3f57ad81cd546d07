"""Every relative link of README.md and docs/*.md reaches a file, and its #anchor a heading there.

Moving a section between pages is how a link breaks silently; this is where it
fails instead. Anchors are GitHub's: the heading lowercased, punctuation but
``-`` and ``_`` dropped, spaces as dashes, ``-1``, ``-2``... for repeats.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from pytest_vllm_conformance.catalogue.serving_profile import load_profile

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.M | re.S)
CODE_SPAN = re.compile(r"`+[^`\n]*`+")
LINK = re.compile(r"\[[^\]\n]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.M)


def links(text: str) -> list[str]:
    prose = CODE_SPAN.sub("code", FENCE.sub("", text))
    return LINK.findall(prose)


def anchors(text: str) -> set[str]:
    found: set[str] = set()
    for heading in HEADING.findall(FENCE.sub("", text)):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        candidate, repeat = slug, 0
        while candidate in found:
            repeat += 1
            candidate = f"{slug}-{repeat}"
        found.add(candidate)
    return found


def broken_links(page: Path) -> list[str]:
    broken = []
    for target in links(page.read_text(encoding="utf-8")):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto: are not ours to check
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file.read_text(encoding="utf-8")):
            broken.append(f"{target}: no heading #{anchor} in {file.name}")
    return broken


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(REPO)))
def test_every_relative_link_reaches_its_file_and_anchor(page: Path) -> None:
    assert not broken_links(page), f"{page.relative_to(REPO)}: {broken_links(page)}"


def test_the_checker_sees_a_broken_file_and_a_broken_anchor(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Title\n\n## The `wire` suite: shapes\n\n## Again\n\n## Again\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](other.md#the-wire-suite-shapes) [ok](other.md#again-1) [web](https://example.com/x)\n"
        "`[in code](nowhere.md)`\n```\n[in a fence](nowhere.md)\n```\n"
        "[gone](missing.md) [bad anchor](other.md#nothing) [self](#title)\n"
    )
    assert [problem.split(":")[0] for problem in broken_links(page)] == ["missing.md", "other.md#nothing", "#title"]


def test_the_readme_example_profile_is_a_valid_profile(tmp_path: Path) -> None:
    blocks = re.findall(r"^```yaml\n(.*?)^```", (REPO / "README.md").read_text(encoding="utf-8"), re.M | re.S)
    profiles = [block for block in blocks if (yaml.safe_load(block) or {}).get("profile") == 1]
    assert profiles, "README.md shows no serving profile"
    for number, block in enumerate(profiles):
        path = tmp_path / f"readme-{number}.yaml"
        path.write_text(block)
        load_profile(path)  # raises ProfileError naming the field
