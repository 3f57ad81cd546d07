"""A captured observation as capture.py writes it, for tests that need no server."""

from __future__ import annotations

import copy
from typing import Any

MODEL = "tiny-llama"

_OBSERVED: dict[str, Any] = {
    "captured_at": "2025-01-01T00:00:00+00:00",
    "captured_by": "pytest-vllm-conformance 0.1.0",
    "url": "http://127.0.0.1:8000",
    "vllm_version": "0.31.0",
    "model": MODEL,
    "models": [{"id": MODEL, "max_model_len": 2048, "root": "/models/tiny-llama"}],
    "max_model_len": 2048,
    "routes": [
        "GET /health",
        "GET /v1/models",
        "POST /v1/chat/completions",
        "POST /v1/completions",
        "POST /v1/completions/render",
    ],
    "auth": {"v1_models_without_key": 401, "posture": "required"},
    "scale_out": {"probe": "POST /v1/chat/completions/render", "status": 404, "state": "disabled"},
    "validation_error": {
        "request": "POST /v1/completions promptx100",
        "status": 400,
        "bytes": 1328,
        "truncated": False,
        "errors_reported": 301,
        "entries_listed": 10,
        "bounded": True,
    },
    "metrics": {"names": ["vllm:num_preemptions_total", "vllm:request_num_preemptions"], "truncated": False},
    "tokenizer": {"text": "fixed text", "token_count": 3, "sha256": "a" * 64, "chat_sha256": "b" * 64},
    "rendering": {
        "corpus": 1,
        "dates": "dates compared as one mark",
        "conversations": {
            "system prompt": {
                "status": 200,
                "ids": [1, 9, 10, 2, 1, 11, 12, 2],
                "tokens": ["<|im_start|>", "system", "Ċhi", "<|im_end|>", "<|im_start|>", "user", "Ċyo", "<|im_end|>"],
                "dates": [],
            },
            "tool call and result": {"status": 400, "refused": "can only concatenate str (not NoneType) to str"},
        },
    },
    "generation_defaults": {
        "source": "render",
        "completions_max_tokens": 16,
        "greedy": False,
        "chat_sampling": {"temperature": 1.0, "max_tokens": "the rest of the context"},
    },
    "wire_extensions": {
        "completion": ["choices.*.prompt_logprobs", "choices.*.stop_reason", "choices.*.token_ids"],
        "completion_chunk": ["choices.*.stop_reason"],
        "chat_completion": ["choices.*.stop_reason", "prompt_logprobs"],
        "chat_chunk": ["choices.*.delta.reasoning"],
    },
}


def observation(**changes: Any) -> dict[str, Any]:
    """A deep copy of the sample, with top-level keys replaced."""
    observed = copy.deepcopy(_OBSERVED)
    observed.update(copy.deepcopy(changes))
    return observed
