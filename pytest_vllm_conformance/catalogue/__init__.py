"""What is checked and expected: contracts and vLLM's facts by version, profiles, applicability, cases."""
