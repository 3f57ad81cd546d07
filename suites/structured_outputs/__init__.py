"""Structured outputs: a constraint the request carries holds, an invalid one is refused, a removed one is not lost."""
