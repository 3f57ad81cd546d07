"""The protocol floor: vLLM's HTTP answers read one way for every feature.

Between the connection (bytes over HTTP) and the features (verdicts): the SSE
reader, the /metrics reader, the /tokenize sender, the error envelope, the
generation routes and what they accept and return, an engine's last errors in a server log, and the small
statistics more than one feature uses. Nothing here judges: a feature
decides what a reading means for its contracts.
The one exception is what two features judge alike: a constrained answer cut
by max_tokens (``json_prefix``, ``answer_controls``) and a forced tool call
(``cut_calls``), shared by structured outputs, tool calls and the agent loops.
"""
