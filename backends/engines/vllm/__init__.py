"""vLLM as an engine: its own virtual environment, a model folder it can load, a managed server."""
