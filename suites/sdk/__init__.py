"""SDK: the official OpenAI Python SDK, and Anthropic's on /v1/messages, parse what the server answers."""
