"""Reasoning: with the declared reasoning parser, the reasoning comes back where the version documents it."""
