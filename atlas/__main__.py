"""make atlas: measure what is not measured yet, check it against the catalogue, render the pages."""

from __future__ import annotations

import argparse
import os
import sys
import time

from atlas import data
from atlas.plan import FLAG_SETS, GPTQ_PYTHON_ENV, NEWEST_MEASURABLE, PYTHON_ENV, RELEASES, flag_set


def _python_of(release: str) -> str | None:
    if release == NEWEST_MEASURABLE:
        return sys.executable
    return os.environ.get(PYTHON_ENV.format(release.replace(".", "_"))) or None


def run(args: argparse.Namespace) -> int:
    from atlas.runner import measure, scratch
    from fixtures.tiny_models import build_all

    atlas = data.load()
    models = build_all()
    releases = args.release or [r for r, why_not in RELEASES.items() if not why_not]
    sets = [flag_set(name) for name in (args.flag_set or [f.name for f in FLAG_SETS])]
    if any(flags.lora_adapter for flags in sets):
        from fixtures import lora_adapters

        models.update(lora_adapters.build_all())
    gptq_python = os.environ.get(GPTQ_PYTHON_ENV)
    if any(flags.gptq for flags in sets) and not gptq_python:
        skipped = [flags.name for flags in sets if flags.gptq]
        print(f"atlas: {', '.join(skipped)}: no quantizer (make gptq-models, then set {GPTQ_PYTHON_ENV}); skipped")
        sets = [flags for flags in sets if not flags.gptq]
    for flags in sets:
        if flags.gptq and gptq_python:
            from fixtures import gptq_models

            models[flags.model] = gptq_models.build(flags.gptq, gptq_python)
    began = time.monotonic()
    for release in releases:
        python = _python_of(release)
        if python is None:
            print(f"atlas: {release}: no Python (set {PYTHON_ENV.format(release.replace('.', '_'))}); skipped")
            continue
        for flags in sets:
            record_key = data.key(release, flags.name)
            if record_key in atlas["records"] and not args.again:
                print(f"atlas: {record_key} already measured")
                continue
            print(f"atlas: measuring {record_key} ...", flush=True)
            record = measure(release, flags, python, models, scratch())
            atlas["records"][record_key] = record
            data.save(atlas)  # after each record: a stopped run resumes where it was
            print(f"atlas: {record_key}: {record['status']} in {record['seconds']} s", flush=True)
    print(f"atlas: measured in {round(time.monotonic() - began)} s")
    status = check_catalogue(atlas)
    return render(write=True) or status


def check_catalogue(atlas: dict) -> int:
    from atlas.catalogue_check import contradictions

    found = contradictions(atlas["records"])
    for line in found:
        print(f"atlas: the catalogue disagrees with the measurement: {line}")
    return 1 if found else 0


def render(*, write: bool) -> int:
    """Write the pages from atlas.json, or (write=False) fail naming each page that is stale."""
    from atlas.render import pages

    stale = []
    for name, text in pages(data.load()).items():
        path = data.ATLAS_DIR / name
        if write:
            path.write_text(text)
        elif not path.exists() or path.read_text() != text:
            stale.append(name)
    for name in stale:
        print(f"atlas: docs/atlas/{name} is stale: run python -m atlas render")
    return 1 if stale else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m atlas")
    sub = parser.add_subparsers(dest="command", required=True)
    measure = sub.add_parser("run", help="measure what is not measured yet")
    measure.add_argument("--release", action="append", choices=[r for r, w in RELEASES.items() if not w])
    measure.add_argument("--flag-set", action="append", choices=[f.name for f in FLAG_SETS])
    measure.add_argument("--again", action="store_true", help="measure again what is measured already")
    pages = sub.add_parser("render", help="write the pages from atlas.json")
    pages.add_argument("--check", action="store_true", help="fail when a committed page is stale instead")
    sub.add_parser("check", help="compare the measured verdicts with what the catalogue's facts predict")
    args = parser.parse_args(argv)
    if args.command == "render":
        return render(write=not args.check)
    if args.command == "check":
        return check_catalogue(data.load())
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
