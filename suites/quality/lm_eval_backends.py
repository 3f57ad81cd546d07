"""lm-eval's own API backends, pointed at a vLLM server with a tokenizer that never comes from the Hub.

lm-eval needs a tokenizer for loglikelihood tasks (to find where the
continuation starts) and, by default, asks ``transformers`` for one by the
model's name, which means a Hub download. The tokenizer here is, in order:

1. a local tokenizer the user gave (``--vllm-eval-tokenizer PATH``), loaded
   by lm-eval's ``huggingface`` backend from that path only;
2. the server's, through lm-eval's ``remote`` backend, when the server
   answers ``/tokenizer_info`` (``vllm serve --enable-tokenizer-info-endpoint``);
3. the server's ``/tokenize`` and ``/detokenize``, which vLLM serves by
   default: lm-eval's ``RemoteTokenizer`` minus its ``/tokenizer_info``
   probe. Nothing but the tokenizer differs from ``local-completions``.

Chat runs need no tokenizer: the server applies its own template.
Imported only after ``offline.go_offline()``.
"""

from __future__ import annotations

from typing import Any

from lm_eval.api.registry import get_model
from lm_eval.models.openai_completions import LocalCompletionsAPI
from lm_eval.utils import RemoteTokenizer


class ServerTokenizer(RemoteTokenizer):
    """The server's /tokenize and /detokenize, for servers that hide /tokenizer_info."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._encoded: dict[str, list[int]] = {}
        super().__init__(*args, **kwargs)

    def _validate_server(self) -> None:
        self.encode("tokenizer probe")

    def encode(self, text: str) -> list[int]:
        # lm-eval encodes a multiple-choice context once per choice; one request per distinct text is enough.
        if text not in self._encoded:
            self._encoded[text] = super().encode(text)
        return list(self._encoded[text])

    @property
    def tokenizer_info(self) -> dict[str, Any]:
        # Only special-token names come from here; lm-eval needs them for empty contexts, which our tasks never have.
        return {}


class ServerTokenizedCompletions(LocalCompletionsAPI):
    """lm-eval's ``local-completions`` whose tokenizer is the server's /tokenize."""

    def __init__(self, base_url: str, auth_token: str | None = None, **kwargs: Any) -> None:
        super().__init__(base_url=base_url, tokenizer_backend=None, auth_token=auth_token, **kwargs)
        self.tokenizer_backend = "remote"
        self.tokenizer = ServerTokenizer(base_url, self.timeout, auth_token=auth_token)
        self.tokenized_requests = True


def completions(base_url: str, tokenizer: str, auth_token: str | None, local_tokenizer: str | None, **common: Any):
    """``tokenizer``: ``local``, ``tokenizer_info`` or ``tokenize`` (the order above)."""
    url = f"{base_url}/v1/completions"
    if tokenizer == "local":
        return get_model("local-completions")(
            base_url=url, tokenizer_backend="huggingface", tokenizer=local_tokenizer, **common
        )
    if tokenizer == "tokenizer_info":
        return get_model("local-completions")(base_url=url, tokenizer_backend="remote", auth_token=auth_token, **common)
    return ServerTokenizedCompletions(base_url=url, auth_token=auth_token, **common)


def chat(base_url: str, **common: Any):
    return get_model("local-chat-completions")(
        base_url=f"{base_url}/v1/chat/completions", tokenizer_backend=None, tokenized_requests=False, **common
    )
