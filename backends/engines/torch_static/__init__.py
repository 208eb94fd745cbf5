"""Our own PyTorch GPT-2 (`model`) with a static KV cache, and the engine that runs it (`engine`)."""
