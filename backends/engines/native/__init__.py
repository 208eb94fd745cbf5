"""whistle-stop's own C runtime: GPT-2's whole step in one call (backends/kernels/gpt2_step.c)."""
