"""Sampling parameters judged by their effect on the server's own answers, never by their wording."""
