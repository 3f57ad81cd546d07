"""Tool calls: a forced choice comes back as a parsed call, streamed or not, or is refused without a parser."""
