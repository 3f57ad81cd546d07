"""The embedding_limits suite's machinery: oversized prompt_embeds declarations, and torch.save
payloads written without torch."""
