"""llama.cpp's own server (llama-cpp-python[server]) on the GGUF a llamacpp engine built: what
`bench --serve-cold-start` times beside `whistle-stop serve`. Light: it imports no llama_cpp."""

from __future__ import annotations

import importlib.util
import sys

from ..sources.model_files import ModelFiles
from .artifact_folders import GGUF_FILE, gguf
from .server.lifecycle import ServerCommand, ServerUnavailable

SERVER_MODULES = ("llama_cpp", "uvicorn", "fastapi", "sse_starlette", "starlette_context", "pydantic_settings")
INSTALL = 'pip install "llama-cpp-python[server]"'


def server_command(model: ModelFiles, port: int, threads: int, quant: str = "f32") -> ServerCommand:
    """`python -m llama_cpp.server` with the engine's settings: its context, threads and, for f32, an
    f32 KV cache (as the llamacpp engine uses)."""
    missing = [m for m in SERVER_MODULES if importlib.util.find_spec(m) is None]
    if missing:
        raise ServerUnavailable(f"llama.cpp's server needs {', '.join(missing)}: {INSTALL}")
    path = gguf(model, quant)[0] / GGUF_FILE
    if not path.is_file():
        raise ServerUnavailable(f"no {quant} GGUF of this model yet (the llamacpp engine builds it on first use)")
    argv = [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model",
        str(path),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_ctx",
        str(model.context),
        "--n_threads",
        str(threads),
        "--n_threads_batch",
        str(threads),
        "--interrupt_requests",  # its default cuts a running stream short when another request comes
        "False",
    ]
    if quant == "f32":
        argv += ["--type_k", "0", "--type_v", "0"]  # GGML_TYPE_F32
    return ServerCommand(argv, port, name="llama.cpp server (llama-cpp-python)", ready_path="/v1/models")
