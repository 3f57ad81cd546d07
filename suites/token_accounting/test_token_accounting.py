"""Token accounting: ``usage`` adds up on every generation route the server serves, streamed and not.

What billing and context budgeting trust: prompt tokens are the rendered
prompt's length (``/tokenize`` on the same prompt), completion tokens the
tokens generated (the returned token ids; where a route returns none, a
finish on the length limit), the total present and their sum (Anthropic
messages report none), and a stream's final
usage that of the same greedy request unstreamed.
"""

from pytest_vllm_conformance import contract, each

from .usage import accounting_cases, accounting_problems


@contract("token_accounting.usage_adds_up")
@each("case", accounting_cases)
def test_usage_adds_up(case, vllm_client, vllm_facts, vllm_evidence):
    problems = accounting_problems(vllm_client, vllm_facts.model, case)
    assert not problems, f"{case}: " + "; ".join(problems)
    # A stream's usage is judged, and the same request's unstreamed usage it is compared with.
    vllm_evidence.judged(2 if case.streamed else 1, "usage reports")
