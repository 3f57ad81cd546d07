"""Command line watermark detection (docs/watermark.md shows it at work).

    vllm-conformance-watermark detect \\
        --algorithm gumbel|dual_key_gumbel --context-width N \\
        [--alpha A] [--p-value-threshold P] [--no-dedup] --key-env VAR FILE

``python -m pytest_vllm_conformance.watermark`` is the same command
where the console script is not on PATH.

FILE (``-`` = stdin) holds JSON Lines, one JSON list of *generated* token ids
per line. For each line one JSON object is printed:
``{"score", "p_value", "num_scored_tokens", "is_watermarked"}``.

The key is read only from the environment variable named by ``--key-env``
(decimal, or hex with a ``0x`` prefix): command lines end up in shell history
and process listings, environments much less so. Usage errors, a
missing/invalid key and malformed input lines exit with status 2; results of
the lines before a malformed line have already been printed by then.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from typing import IO, Any, NoReturn

from pytest_vllm_conformance.watermark.detector import make_detector
from pytest_vllm_conformance.watermark.keys import InvalidKey, parse_key

EXIT_USAGE = 2
SCRIPT = "vllm-conformance-watermark"
MODULE_PROG = "python -m pytest_vllm_conformance.watermark"
_VARIABLE_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class _InputError(Exception):
    """A problem with the input or environment, reported as a one-line error."""


def _fail(message: str) -> NoReturn:
    raise _InputError(message)


def _read_key(variable: str) -> int:
    if not _VARIABLE_PATTERN.fullmatch(variable):
        # Not echoed: the likeliest mistake is passing the key itself.
        _fail(
            "--key-env takes the NAME of an environment variable that holds the key "
            "(letters, digits, underscores), not the key itself"
        )
    raw = os.environ.get(variable)
    if raw is None:
        _fail(f"environment variable {variable} is not set (it must hold the watermark key)")
    try:
        return parse_key(raw)
    except InvalidKey as problem:
        _fail(f"environment variable {variable} holds a key that {problem}")


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # No prefix matching: `--key SECRET` must not silently become
        # `--key-env SECRET` (and then be printed as a variable name).
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        # argparse echoes unknown arguments; someone who tried `--key SECRET`
        # should not see it printed again (into a CI log, say).
        if message.startswith("unrecognized arguments"):
            message = (
                "unrecognized arguments (not repeated here); "
                "note that the key is only read from the variable named by --key-env"
            )
        super().error(message)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be >= 1")
    return value


def _prog() -> str:
    # Messages name the command as it was typed: the console script, or `python -m` (argv[0] is this file).
    name = os.path.basename(sys.argv[0]) if sys.argv else ""
    return SCRIPT if name.removesuffix(".exe") == SCRIPT else MODULE_PROG


def _build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=_prog(),
        description="Detect vLLM Gumbel watermarks in token id sequences.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    detect = commands.add_parser(
        "detect",
        help="score JSON Lines of generated token ids",
        description=(
            "Read one JSON list of generated token ids per line (no prompt tokens) "
            "and print one JSON detection result per line."
        ),
    )
    detect.add_argument(
        "--algorithm",
        required=True,
        choices=("gumbel", "dual_key_gumbel"),
        help="the server's watermark_config.algorithm",
    )
    detect.add_argument(
        "--context-width",
        required=True,
        type=_positive_int,
        metavar="N",
        help="the server's watermark_config.context_width (vLLM default 4)",
    )
    detect.add_argument(
        "--alpha",
        type=float,
        default=None,
        metavar="A",
        help="dual_key_gumbel only: the server's watermark_config.alpha (default 0.1)",
    )
    detect.add_argument(
        "--p-value-threshold",
        type=float,
        default=0.01,
        metavar="P",
        help="is_watermarked is p_value <= P; must be in (0, 1) (default 0.01)",
    )
    detect.add_argument(
        "--no-dedup",
        dest="deduplicate_contexts",
        action="store_false",
        help="score tokens whose context already occurred (vLLM's deduplicate_contexts=False)",
    )
    detect.add_argument(
        "--key-env",
        required=True,
        metavar="VAR",
        help="name of the environment variable that holds the watermark key",
    )
    detect.add_argument("file", metavar="FILE", help="JSON Lines input, or - for stdin")
    return parser


def _parse_line(number: int, line: str) -> list[int]:
    if not line.strip():
        _fail(f"line {number}: empty line (expected a JSON list of token ids)")
    try:
        value = json.loads(line)
    except json.JSONDecodeError as exc:
        _fail(f"line {number}: invalid JSON ({exc.msg} at column {exc.colno})")
    except ValueError:  # e.g. an integer literal beyond Python's digit limit
        _fail(f"line {number}: not a list of valid token ids")
    if not isinstance(value, list):
        _fail(f"line {number}: expected a JSON list of token ids, got {type(value).__name__}")
    for index, item in enumerate(value):
        if type(item) is not int:
            _fail(f"line {number}: item {index} is not an integer token id")
        if not 0 <= item <= 2**63 - 1:
            _fail(f"line {number}: item {index} is not a valid token id (0 <= id < 2**63)")
    return value


def _detect(args: argparse.Namespace, stream: IO[str], out: IO[str]) -> None:
    if args.alpha is not None and args.algorithm != "dual_key_gumbel":
        _fail("--alpha only applies to --algorithm dual_key_gumbel")
    key = _read_key(args.key_env)
    options: dict[str, object] = {
        "context_width": args.context_width,
        "p_value_threshold": args.p_value_threshold,
        "deduplicate_contexts": args.deduplicate_contexts,
    }
    if args.alpha is not None:
        options["alpha"] = args.alpha
    try:
        detector = make_detector(args.algorithm, key, **options)
    except (TypeError, ValueError) as exc:
        # Constructor messages never contain the key (see prf.validate_key).
        _fail(str(exc))
    for number, line in enumerate(stream, start=1):
        token_ids = _parse_line(number, line)
        result = detector.detect(token_ids)
        out.write(json.dumps(result.to_dict()) + "\n")
        # Flush per line so that a consumer reading a pipe sees results as
        # they are computed.
        out.flush()


def main(argv: list[str] | None = None) -> int:
    parser = _build_parser()
    args = parser.parse_args(argv)  # exits with status 2 on usage errors
    try:
        if args.file == "-":
            _detect(args, sys.stdin, sys.stdout)
        else:
            try:
                stream = open(args.file, encoding="utf-8")
            except OSError as exc:
                _fail(f"cannot read {args.file}: {exc.strerror}")
            with stream:
                _detect(args, stream, sys.stdout)
    except _InputError as exc:
        print(f"{parser.prog} detect: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except UnicodeDecodeError:
        print(f"{parser.prog} detect: error: input is not UTF-8 text", file=sys.stderr)
        return EXIT_USAGE
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
