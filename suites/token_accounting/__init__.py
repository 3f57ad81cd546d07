"""Token accounting: `usage` adds up on every generation route the server serves, streamed and not."""
