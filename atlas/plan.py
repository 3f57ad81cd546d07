"""What the atlas measures: the releases, the named flag sets, and the one production profile."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fixtures import scripted_output
from fixtures.server_specs import (
    CPU_SERVE_ARGS,
    DERIVED_LENGTH_ARGS,
    POOLING_SERVE_ARGS,
    ROOT_PATH,
    SMALL_KV_CACHE_ARGS,
)

# Oldest first. ``why_not`` says why a release has no column of measurements.
RELEASES: dict[str, str] = {
    "0.28": "",
    "0.29": "",
    "0.30": "",
    "0.31": "",
    "0.32": "",
    "0.33": "not measured (no CPU build)",
}
NEWEST_MEASURABLE = "0.32"
# The environment variable naming the Python of a release's venv (0.32's is the running one).
PYTHON_ENV = "VLLM_CONFORMANCE_PYTHON_{}"

TOOL_ARGS = ("--enable-auto-tool-choice", "--tool-call-parser", "hermes")
# vLLM refuses float32 for GPTQ; bfloat16 is what the CPU WNA16 kernel runs (docs/gptq.md).
GPTQ_SERVE_ARGS = ("--dtype", "bfloat16", *CPU_SERVE_ARGS[2:])
# Names the quantizer's Python (make gptq-models): the GPTQ checkpoints' cache key holds its version.
GPTQ_PYTHON_ENV = "VLLM_CONFORMANCE_GPTQ_PYTHON"


@dataclass(frozen=True)
class FlagSet:
    """One way of starting the tiny model, and what the production profile then declares of it."""

    name: str
    summary: str
    model: str
    args: tuple[str, ...]
    api_key: bool = False
    profile: str = ""  # extra profile sections for what these flags turn on
    # The suites these flags can change (pytest -m); plain runs every suite. Every suite under every
    # flag set would take about 6 minutes a server here: five times the run for no new verdicts.
    suites: str = ""
    scripted: bool = False  # every answer scripted (fixtures/scripted_output/), so the model thinks
    gptq: str = ""  # the GPTQModel checkpoint's ordering (fixtures/gptq_models.py), served instead of a tiny model
    url_path: str = ""  # the suites are given the server's URL with this path (its --root-path), as a client is
    # The plugin starts the server (--vllm-serve, the release's Python) instead of the atlas: for suites claimed
    # only where the run owns the process (the lifecycle feature's clocks and drain).
    managed: bool = False
    # A pooling server (--runner pooling): it claims no generation contract, so its "not claimed" there says
    # nothing of the release (atlas/cells.py leaves it out), as a generation server's says nothing of pooling.
    pooling: bool = False
    # A LoRA adapter of fixtures/lora_adapters.py served beside the model: the runner adds
    # --lora-modules tiny-llama-lora=<its built path> (a path of this machine, so not part of args).
    lora_adapter: str = ""
    env: tuple[tuple[str, str], ...] = ()  # the server's environment beyond the atlas's own


# The production profile every release is held to: a locked-down endpoint, the refusals the
# catalogue's defaults ask for, and the wire in vLLM's documented shape. Each flag set adds only what
# its flags declare, the same for every release.
BASE_PROFILE: dict[str, Any] = {
    "profile": 1,
    "name": "atlas-production",
    "endpoint": {
        "scale_out": "disabled",
        "auth": "none",
        "prompt_embeds": "disabled",
        "prompt_embeds_hidden_size": 128,  # every model the atlas serves (tiny llamas, tiny berts) is of this width
        "validation_error_max_bytes": 32768,
    },
    "context": {"max_model_len": 512},
}

# The lora server of fixtures/server_specs.py: rank 8 (the adapter's), one slot (so that the CPU build's index -1 always
# selects the adapter's; fact lora_cpu_no_adapter_tokens), the load and unload routes registered by the environment.
LORA_SERVE_ARGS = (*CPU_SERVE_ARGS, "--enable-lora", "--max-lora-rank", "8", "--max-loras", "1")
LORA_ENV = (("VLLM_ALLOW_RUNTIME_LORA_UPDATING", "1"),)

FLAG_SETS: tuple[FlagSet, ...] = (
    FlagSet("plain", "the tiny model with no feature flags", "tiny-llama", CPU_SERVE_ARGS),
    FlagSet(
        "api_key",
        "behind an API key (VLLM_API_KEY)",
        "tiny-llama",
        CPU_SERVE_ARGS,
        api_key=True,
        profile="endpoint.auth=required",
        suites="discovery or auth or sdk or metrics",
    ),
    FlagSet(
        "scale_out",
        "--enable-scale-out (0.30 added the switch)",
        "tiny-llama",
        (*CPU_SERVE_ARGS, "--enable-scale-out"),
        profile="endpoint.scale_out=enabled",
        suites="discovery or scale_out or validation_bounds",
    ),
    FlagSet(
        "generation",
        "the hermes tool-call parser and a greedy default (the generation server's flags, scale-out aside)",
        "tiny-llama",
        (*CPU_SERVE_ARGS, *TOOL_ARGS, "--override-generation-config", '{"temperature": 0.0}'),
        profile="generation.tool_call_parser=hermes",
        suites="structured_outputs or tool_calls or agent_loops",
    ),
    FlagSet(
        "reasoning",
        "the thinking model behind --reasoning-parser deepseek_r1, its every answer scripted to think first",
        "tiny-llama-thinking",
        (*CPU_SERVE_ARGS, "--reasoning-parser", "deepseek_r1", *scripted_output.serve_args()),
        profile="generation.reasoning_parser=deepseek_r1",
        suites="reasoning or rendering or token_accounting",
        scripted=True,
    ),
    FlagSet(
        "yarn",
        "a YaRN checkpoint with no --max-model-len (the length is derived)",
        "tiny-llama-yarn512",
        DERIVED_LENGTH_ARGS,
        profile="context.max_model_len=-",
        suites="discovery or context",
    ),
    # Real GPTQ checkpoints (make gptq-models): whether the release's CPU kernel generates at all
    # (discovery.ready_generates), and whether a 4-bit model still honours what requests ask for and keeps
    # the engine's invariants; its answers' quality is the drift gate's (docs/quality-drift.md).
    FlagSet(
        "gptq",
        "tiny-llama quantized by GPTQModel: W4A16, groups of 32, static activation ordering, bfloat16",
        "tiny-llama-gptq-static",
        GPTQ_SERVE_ARGS,
        suites="discovery or sampling or engine_invariants",
        gptq="static",
    ),
    FlagSet(
        "gptq_group",
        "the same quantization with grouped activation ordering (desc_act: true), which 0.30 stopped loading",
        "tiny-llama-gptq-group",
        GPTQ_SERVE_ARGS,
        suites="discovery",
        gptq="group",
    ),
    # The facts of issue 54, each where it shows. --root-path /v is a string prefix of /v1: the key check strips it
    # as a string (fact auth_root_path_stripping), so the bare /v1 routes answer without a key; the auth suite is
    # given the URL with the root path, as a client of that server is.
    FlagSet(
        "root_path",
        f"behind an API key with --root-path {ROOT_PATH} (a string prefix of /v1), the suites given the URL with it",
        "tiny-llama",
        (*CPU_SERVE_ARGS, "--root-path", ROOT_PATH),
        api_key=True,
        profile="endpoint.auth=required",
        suites="auth",
        url_path=ROOT_PATH,
    ),
    # A drain of 10 s declared and set (fact shutdown_modes): started by the plugin, which the lifecycle feature
    # needs (it stops the server), and so timed to readiness too.
    FlagSet(
        "shutdown_timeout",
        "--shutdown-timeout 10, started by the plugin (--vllm-serve), which times its start and SIGTERMs it",
        "tiny-llama",
        (*CPU_SERVE_ARGS, "--shutdown-timeout", "10"),
        profile="lifecycle.drain_seconds=10",
        suites="lifecycle",
        managed=True,
    ),
    # A KV cache of six blocks (fixtures/server_specs.py's small_kv_cache; fact kv_cache_capacity): three greedy
    # answers at once preempt, so the preemption contract is claimed.
    FlagSet(
        "small_kv_cache",
        "a KV cache of six blocks (--num-gpu-blocks-override 6), so that three answers at once preempt",
        "tiny-llama",
        SMALL_KV_CACHE_ARGS,
        suites="engine_invariants",
    ),
    # Pooling servers (issue 53), judged as pooling servers: discovery reads what they serve, every generation
    # contract is not claimed there and the pooling suite judges their answers. The whole default selection, as a
    # user runs it (about a minute a server: most suites end at "not claimed"). The profile adds what the pooling
    # proofs' profiles declare (tests/support/profiles.py): the embedding model's name and its Matryoshka-ness.
    FlagSet(
        "embedding",
        "tiny-bert, an embedding model (a BertModel, CLS pooling), with --runner pooling",
        "tiny-bert",
        POOLING_SERVE_ARGS,
        pooling=True,
        profile="wire.embedding_model=tiny-bert,pooling.matryoshka=false",
    ),
    FlagSet(
        "cross_encoder",
        "tiny-bert-reranker, a cross-encoder (a BERT classifier of one label), with --runner pooling",
        "tiny-bert-reranker",
        POOLING_SERVE_ARGS,
        pooling=True,
    ),
    FlagSet(
        "classifier",
        "tiny-bert-classifier, a BERT classifier of three named labels, with --runner pooling",
        "tiny-bert-classifier",
        POOLING_SERVE_ARGS,
        pooling=True,
    ),
    # LoRA on CPU (issue 53): tiny-llama with a seeded rank-8 adapter (fixtures/lora_adapters.py), loadable at run
    # time. The profile declares nothing: the lora suite is claimed from the adapter's card on /v1/models, as
    # tests/integration/test_lora_on_real_vllm.py runs it.
    FlagSet(
        "lora",
        "tiny-llama with a rank-8 adapter (--enable-lora --lora-modules, --max-loras 1), loadable at run time",
        "tiny-llama",
        LORA_SERVE_ARGS,
        suites="discovery or lora",
        lora_adapter="tiny-llama-lora",
        env=LORA_ENV,
    ),
)


def flag_set(name: str) -> FlagSet:
    return next(f for f in FLAG_SETS if f.name == name)


def profile_of(flags: FlagSet) -> dict[str, Any]:
    """The production profile with this flag set's declarations (``KEY=VALUE``, the value read as YAML; ``-``
    removes the key)."""
    import copy

    import yaml

    profile = copy.deepcopy(BASE_PROFILE)
    for assignment in filter(None, flags.profile.split(",")):
        key, value = assignment.split("=", 1)
        section, name = key.split(".", 1)
        if value == "-":
            profile.get(section, {}).pop(name, None)
        else:
            profile.setdefault(section, {})[name] = yaml.safe_load(value)
    return {section: body for section, body in profile.items() if body != {}}
