"""A quantized checkpoint will start on the target vLLM release and be read as its quantizer wrote it."""
