"""Output quality: the target answers as well as its baseline (logprobs, greedy tokens, lm-eval tasks)."""
