"""llama.cpp: our own GGUF export and the engine that drives llama-cpp-python token by token."""
