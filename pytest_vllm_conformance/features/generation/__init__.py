"""Generation controls: structured-output constraints, tool calls, and the defaults a bare request gets."""
