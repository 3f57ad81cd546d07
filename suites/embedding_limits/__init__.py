"""Client-supplied prompt_embeds: refused when disabled, served when enabled, a huge declared shape refused fast."""
