"""A LiteLLM proxy hook that keeps callers from opting out of vLLM's watermark.

vLLM 0.30+ skips the watermark for a request that says "watermarking": false;
LiteLLM forwards that field to vLLM as it is. This hook removes it before
LiteLLM calls vLLM, wherever LiteLLM keeps a caller's extra fields (the body
itself, or extra_body / the provider's optional parameters, depending on the
route), so no caller can turn the watermark off. docs/watermark-ingress.md
shows this class; tests/unit/test_examples.py keeps the two the same.
"""

from litellm.integrations.custom_logger import CustomLogger


class StripWatermarking(CustomLogger):
    async def async_pre_call_hook(self, user_api_key_dict, cache, data, call_type):
        data.pop("watermarking", None)
        for key in ("extra_body", "optional_params", "litellm_params", "sampling_params"):
            if isinstance(data.get(key), dict):
                data[key].pop("watermarking", None)
        return data


hook = StripWatermarking()
