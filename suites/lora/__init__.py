"""LoRA adapters that really apply: listed on their base, answering as themselves, loaded and unloaded at run time."""
