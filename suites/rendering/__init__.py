"""Rendering: the chat path renders each conversation of the corpus as ``/tokenize`` renders it."""
