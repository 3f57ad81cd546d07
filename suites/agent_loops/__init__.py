"""Agent loops: what Codex, the Agents SDK and Claude Code rely on across a stream and across turns."""
