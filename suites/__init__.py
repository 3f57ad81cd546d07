"""The conformance suites users run: ``pytest suites --vllm-url=URL``.

Installed without a clone, the same suites run as
``pytest --pyargs pytest_vllm_conformance.suites --vllm-url=URL``.
"""
