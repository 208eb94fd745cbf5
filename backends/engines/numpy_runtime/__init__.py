"""The torch-free engine: GPT-2 in numpy (`model`) on a zero-copy mmap of the safetensors (`engine`)."""
