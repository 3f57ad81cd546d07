"""The serving profiles and expectations the server tests run the suites with."""

from __future__ import annotations

import json

from fixtures.server_specs import WATERMARK_KEY as WATERMARK_KEY  # the watermark server's key

PLAIN_PROFILE = """
profile: 1
name: plain
endpoint:
  scale_out: disabled
  auth: none
  prompt_embeds: disabled
  prompt_embeds_hidden_size: 128
  validation_error_max_bytes: 32768
context:
  max_model_len: 512
generation:
  legacy_fields: ignored_ok
"""

# The embedding server's profile (tiny-bert, --runner pooling).
EMBEDDING_PROFILE = """
profile: 1
name: embedding
endpoint:
  auth: none
wire:
  embedding_model: tiny-bert
pooling:
  matryoshka: false  # tiny-bert's config.json declares no matryoshka_dimensions
"""

# The Matryoshka embedder's profile (tiny-bert-matryoshka, served as tiny-bert): dimensions honoured.
MATRYOSHKA_PROFILE = EMBEDDING_PROFILE.replace(
    "matryoshka: false  # tiny-bert's config.json declares no matryoshka_dimensions",
    "matryoshka: true  # its config.json declares matryoshka_dimensions [32, 64, 128]",
)
assert MATRYOSHKA_PROFILE != EMBEDDING_PROFILE

# The cross-encoder's and the classifier's profile: the endpoint only (they embed nothing, so no embedding model).
POOLING_PROFILE = """
profile: 1
name: pooling
endpoint:
  auth: none
"""

# The generation server's profile: its tool-call parser. Legacy guided_* fields keep
# the default (refused), which vLLM 0.32 fails: it answers them 200 and ignores them.
GENERATION_PROFILE = """
profile: 1
name: generation
generation:
  tool_call_parser: hermes
"""

# The reasoning server's profile: its reasoning parser.
REASONING_PROFILE = """
profile: 1
name: reasoning
generation:
  reasoning_parser: deepseek_r1
"""

# vLLM 0.32 leaves these routes outside its guarded prefixes; this profile
# accepts them as public so that the fault tests can show one more leak.
GATED_PROFILE = """
profile: 1
name: gated
endpoint:
  scale_out: enabled
  auth: required
  prompt_embeds: enabled
  validation_error_max_bytes: 32768
  public_routes: [/health, /ping, /version, /load, /metrics, /openapi.json, /docs, /docs/oauth2-redirect,
                  /redoc, /tokenize, /detokenize, /invocations, /generative_scoring, /scale_elastic_ep,
                  /is_scaling_elastic_ep, /kv_event_sources]
generation:
  legacy_fields: ignored_ok
"""


WATERMARK_KEY_ENV = "CONFORMANCE_TEST_WATERMARK_KEY"
# The generation APIs a watermarking server of ours serves (scale-out on), as the suite names them.
WATERMARK_APIS = (
    "completions (POST /v1/completions)",
    "chat completions (POST /v1/chat/completions)",
    "responses (POST /v1/responses)",
    "SageMaker invocations (POST /invocations)",
    "token generate (POST /inference/v1/generate)",
    "batch chat completions (POST /v1/chat/completions/batch)",
    "Anthropic messages (POST /v1/messages)",
)
WATERMARK_PROFILE = f"""
profile: 1
name: watermarked
endpoint:
  scale_out: enabled
watermark:
  required: true
  algorithm: gumbel
  context_width: 4
  key_env: {WATERMARK_KEY_ENV}
"""


def watermark_ingress_rules():
    """A watermark ingress: the opt-out removed on every generation path.

    In front of the server it is also a server that ignores the opt-out, as
    vLLM is without the watermark's middleware: vLLM never sees the field."""
    from fixtures.fault_proxy import StripJsonField

    return [
        StripJsonField(
            "watermarking",
            path=r"/v1/(chat/)?completions(/batch)?|/v1/responses|/v1/messages|/invocations|/cohere/v2/chat",
        ),
        StripJsonField("watermarking", within=("sampling_params",), path="/inference/v1/generate"),
    ]


def hiding(profile: str, *routes: str) -> str:
    """``profile`` declaring ``routes`` hidden by the ingress on purpose (``ingress.hidden_routes``)."""
    return profile + "ingress:\n  hidden_routes: [" + ", ".join(json.dumps(route) for route in routes) + "]\n"
