"""Servers whistle-stop starts itself (vLLM): their process lifecycle and their own metrics."""
