"""Every server our tests start, by name: model, flags and environment."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from fixtures.tiny_tokenizer import CHATML_TEMPLATE
from tests.support.profiles import WATERMARK_KEY

if TYPE_CHECKING:
    from fixtures.servers import ServerSpec

CPU_SERVE_ARGS = ("--dtype", "float32", "--enforce-eager", "--max-model-len", "512")

TEST_KEY = "sk-conformance-test-5d1e7a"


# A hardened server: an API key, and no /openapi.json (--disable-fastapi-docs),
# so every route-driven suite runs on the contract data's route table, probed.
GATED_SERVE_ARGS = (*CPU_SERVE_ARGS, "--enable-scale-out", "--enable-prompt-embeds", "--disable-fastapi-docs")


FLEET_REPLICA_ARGS = (*CPU_SERVE_ARGS, "--enable-prompt-tokens-details")
RESPONSES_STORE_ENV = {"VLLM_ENABLE_RESPONSES_API_STORE": "1"}

# Our servers share a 2-core machine, and the server tests are bound by its CPU, so they run lighter than vLLM's
# CPU defaults (a user's server, and the plugin's embedded one, keep those):
# - unbound compute threads, one each: vLLM's CPU worker binds its thread to core 0 on a machine smaller than
#   one server per core, every server's the same core (the server tests took 20:22 instead of 21:47, 2026-12-04);
# - the worker inside the engine-core process (vLLM's uniproc executor, which the CPU platform keeps when V1
#   multiprocessing is off; AsyncLLM still runs the engine core in its own process): the mp executor's worker and
#   engine core poll their shared-memory queue, so 60 short completions cost 25 CPU-s instead of 10.7, and a start
#   imports torch and vLLM twice instead of three times (53.7 CPU-s instead of 40.3; 2026-12-04, measured by hand
#   with the thread settings equal; bench/start_cost.py compares vLLM's plain defaults with these).
SHARED_MACHINE_ENV = {
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
    "OMP_NUM_THREADS": "1",
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
}


# Every server our tests start, by name: model, flags and environment.
# A name here is what tests/support/schedule.py and ``served`` speak of; two names may share one server.
def server_specs(models: dict[str, Path], compile_cache: Path) -> dict[str, ServerSpec]:
    """``compile_cache``: an empty directory of this session's, for torch inductor's cache (see "compiled")."""
    from fixtures import cpu_watermark, scripted_output
    from fixtures.servers import ServerSpec
    from pytest_vllm_conformance.connection.secrets import Secret

    llama = models["tiny-llama"]
    # Two changes on one server, each read by tests that cannot see the other: the rendering corpus and the
    # capture do not see numerics (the capture holds no dtype), and the greedy and drift gates send
    # completions, which no chat template touches.
    retemplated_bfloat16 = ServerSpec.of(
        llama, ("--dtype", "bfloat16", *CPU_SERVE_ARGS[2:], "--chat-template", SYSTEM_BOS_TEMPLATE)
    )
    # Compilation makes the engine's steps faster if anything, against the throughput fault it carries: a
    # serving proof that fails it still fails it for queueing alone. Cold every time: vLLM's own cache off, and
    # torch inductor's (its generated kernels, kept in /tmp across runs) in a directory of this session's: with
    # a warm inductor cache engine_init took 4.9 s in CI, within the 5-second floor of plain's 2.7.
    one_seq_compiled = ServerSpec.of(
        llama,
        ("--dtype", "float32", "--max-model-len", "512", "--max-num-seqs", "1"),
        env={"VLLM_DISABLE_COMPILE_CACHE": "1", "TORCHINDUCTOR_CACHE_DIR": str(compile_cache)},
    )
    perturbed_uncached = ServerSpec.of(models["tiny-llama-perturbed"], (*CPU_SERVE_ARGS, "--no-enable-prefix-caching"))
    short_context_unbounded_embeds = ServerSpec.of(
        llama,
        ("--dtype", "float32", "--enforce-eager", "--max-model-len", "256", "--enable-prompt-embeds"),
        env={"VLLM_MAX_EMBED_DECODE_BYTES": "0"},
    )

    return {
        # vLLM 0.32's defaults.
        "plain": ServerSpec.of(llama, CPU_SERVE_ARGS),
        # An API key and no /openapi.json: route-driven suites run on the contract data's route table.
        "hardened": ServerSpec.of(llama, GATED_SERVE_ARGS, api_key=Secret(TEST_KEY)),
        # A YaRN checkpoint with no --max-model-len: the length vLLM derives is what is checked.
        "yarn": ServerSpec.of(models["tiny-llama-yarn512"], DERIVED_LENGTH_ARGS),
        # A shorter --max-model-len (the context faults, the skewed replica of the fleet tests) and prompt embeds
        # decoded without vLLM's bound (VLLM_MAX_EMBED_DECODE_BYTES=0, its own switch; vLLM before 0.30 had none).
        # One server for two faults, because each costs a start (tests/support/schedule.py): no test that reads
        # one reads the other (the capture and the fleet do not look at prompt embeds, the embedding suite does
        # not look at the context length). Its second name says which fault a test is after.
        "short_context": short_context_unbounded_embeds,
        "unbounded_embeds": short_context_unbounded_embeds,
        # A queue bound of one; 2048 tokens of context so the held requests outlast the burst.
        "bounded": ServerSpec.of(
            llama,
            (*CPU_SERVE_ARGS, "--max-model-len", "2048", "--max-num-queued-reqs", "1", "--disable-cascade-attn"),
            env={"VLLM_ENABLE_SCALE_OUT_ENDPOINTS": "1"},
        ),
        # An embedding model, the wire suite's /v1/embeddings target. vLLM 0.32 registers BertModel as a pooling
        # model (vllm/model_executor/models/registry.py: "BertModel": BertEmbeddingModel) and resolves
        # `--runner auto` to pooling for it (vllm/config/model.py, _get_runner_type); said here, not left to that.
        "embedding": ServerSpec.of(models["tiny-bert"], (*CPU_SERVE_ARGS, "--runner", "pooling")),
        "perturbed": perturbed_uncached,
        # Prefix caching off: the engine_invariants cache contract is not claimed there. The perturbed server,
        # since the quality and drift gates send each prompt once or ask prompt_logprobs, which never read the
        # cache (vllm/sampling_params.py, skip_reading_prefix_cache): no start of its own.
        "no_prefix_caching": perturbed_uncached,
        # One sequence at a time: a server that queues what plain runs at once (the serving suite's fault).
        "one_seq": one_seq_compiled,
        # A start with a heavier phase than plain's: torch.compile (no --enforce-eager) grows engine_init about
        # tenfold, compiled cold every time so that no cache left by a run before turns it into a warm start.
        # The one_seq server: the start-up proof reads only its log.
        "compiled": one_seq_compiled,
        # The same model and weights as plain, other numerics: a healthy change the quality gate must pass.
        "bfloat16": retemplated_bfloat16,
        # The yarn checkpoint with YaRN factor 2 instead of 4: the copy whose rotary scaling is wrong.
        "yarn_factor2": ServerSpec.of(models["tiny-llama-yarn512-factor2"], DERIVED_LENGTH_ARGS),
        # Tool calls through the hermes parser, render routes that show resolved sampling
        # parameters, and a greedy default: the generation-controls suites' server.
        "generation": ServerSpec.of(llama, GENERATION_SERVE_ARGS),
        # The other-seed model pads its constrained JSON and tool-call arguments with whitespace until
        # max_tokens, on the xgrammar backend (which words its refusals otherwise): a conformant server
        # whose cut answers the generation suites must call undecided, never failed.
        "padding": ServerSpec.of(models["tiny-llama-other-seed"], PADDING_SERVE_ARGS),
        # plain with a chat template that differs in one place: an end-of-text token before each system message
        # (a doubled BOS on one branch). The one-message chat fingerprint cannot see it; the rendering corpus can.
        "retemplated": retemplated_bfloat16,
        # The thinking model behind the deepseek_r1 reasoning parser, its every answer scripted (think, reasoning,
        # end of think, content, end of text): a real reasoning parser parsing real output.
        "reasoning": ServerSpec.of(
            models["tiny-llama-thinking"],
            (*CPU_SERVE_ARGS, "--reasoning-parser", "deepseek_r1", *scripted_output.serve_args()),
            env=scripted_output.server_env(models["tiny-llama-thinking"]),
        ),
        # Two replicas of one deployment behind an entry (the fleet_entry proofs, opt-in: make test-fleet):
        # Responses stored in memory, prompt-token details in usage. "--seed 0" is vLLM's default seed,
        # written out only so that the pool starts two servers of one flag set.
        "replica_a": ServerSpec.of(llama, FLEET_REPLICA_ARGS, env=RESPONSES_STORE_ENV),
        "replica_b": ServerSpec.of(llama, (*FLEET_REPLICA_ARGS, "--seed", "0"), env=RESPONSES_STORE_ENV),
        "watermark": ServerSpec.of(
            llama,
            (*CPU_SERVE_ARGS, "--enable-scale-out", *cpu_watermark.serve_args()),
            env=cpu_watermark.server_env(WATERMARK_KEY),
        ),
    }


# vLLM reads a --chat-template value with Jinja characters that names no file as the template itself.
SYSTEM_BOS_TEMPLATE = CHATML_TEMPLATE.replace(
    "{% for message in messages %}",
    "{% for message in messages %}{% if message['role'] == 'system' %}{{ '<|endoftext|>' }}{% endif %}",
    1,
)
DERIVED_LENGTH_ARGS = ("--dtype", "float32", "--enforce-eager")
GENERATION_SERVE_ARGS = (
    *CPU_SERVE_ARGS,
    "--enable-auto-tool-choice",
    "--tool-call-parser",
    "hermes",
    "--enable-scale-out",
    "--override-generation-config",
    '{"temperature": 0.0}',
)
PADDING_SERVE_ARGS = (
    *CPU_SERVE_ARGS,
    "--enable-auto-tool-choice",
    "--tool-call-parser",
    "hermes",
    "--structured-outputs-config",
    '{"backend": "xgrammar"}',
)
