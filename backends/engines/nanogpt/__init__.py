"""GPT-2 run the way nanoGPT's `generate` runs it: no KV cache, the whole sequence every token."""
