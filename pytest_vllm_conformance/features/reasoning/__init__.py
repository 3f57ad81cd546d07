"""Reasoning: what a server started with ``--reasoning-parser`` hands back, and what it renders of a history.

``answers``: a chat answer's reasoning and content, whole or streamed, and
what is wrong with where they came back. ``history``: an assistant turn's
reasoning in a request's history, under the current and a former field name,
against ``/tokenize``'s rendering. ``routes``: the Responses API's reasoning
items and Anthropic messages' thinking blocks.
"""
