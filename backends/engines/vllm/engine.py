"""`vllm` / `vllm-bf16`: a real vLLM OpenAI-compatible server that whistle-stop sets up, starts,
measures through the `remote` engine's client, and always stops.

Load = make (once) vLLM's own environment and a model folder it loads (both reported as build
time), then start the server on 127.0.0.1 on a free port with the run's thread count and dtype
and wait until /health answers (load time). Never TTFT: every run is timed from its own request.
The server lives as long as this engine's worker (repeats and sweep cells reuse it) and runs under
a guard that stops its whole process group when the worker ends, however it ends.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Sequence

import numpy as np

from ...engine import EngineInfo, EngineOptions, ServerEngine
from ...errors import ModelError
from ...registry import cuda_available
from ...sampling import Sampler
from ...sources.model_files import ModelFiles
from ...storage.paths import cache_dir
from ..remote_engine import CLIENT_USAGE_NOTE, SERVER_SETTINGS_NOTE, RemoteEngine
from ..remote_options import RemoteOptions
from ..server.lifecycle import ManagedServer, ServerCommand, free_port
from ..server.metrics import ServerMetrics
from .environment import ensure_environment
from .model_folder import ensure_model_folder

START_TIMEOUT_S = 900.0  # a CPU start compiles the decode graph: minutes on a slow machine (docs/engines.md)
KV_CACHE_GB = 1  # VLLM_CPU_KVCACHE_SPACE: plenty for GPT-2 at 8 streams of 1,024 positions
CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)  # vLLM's CPU attention kernels
_DTYPES = {"fp32": ("float32", 4), "bf16": ("bfloat16", 2)}


def cpu_binding(threads: int) -> str:
    """VLLM_CPU_OMP_THREADS_BIND for `threads` threads: the first usable CPUs, as ranges (by
    default vLLM reserves a core for its frontend and leaves one of two cores idle)."""
    usable = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    chosen = usable[:max(1, threads)]
    runs: list[list[int]] = []
    for cpu in chosen:
        if runs and cpu == runs[-1][-1] + 1:
            runs[-1].append(cpu)
        else:
            runs.append([cpu])
    return ",".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in runs)


def client_notes(notes: str) -> list[str]:
    """The remote client's notes that hold for a server this engine started and sized itself."""
    return [n for n in notes.split("; ") if n not in (CLIENT_USAGE_NOTE, SERVER_SETTINGS_NOTE)]


class VllmEngine(ServerEngine):
    def __init__(self, name: str, options: EngineOptions, dtype: str = "fp32") -> None:
        super().__init__(name, options)
        self.dtype = dtype
        self.server: ManagedServer | None = None
        self.client: RemoteEngine | None = None

    def load(self, model: ModelFiles, progress) -> EngineInfo:
        config = model.gpt2_config
        flavour = "cuda" if cuda_available() else "cpu"
        if flavour == "cpu" and config.head_dim not in CPU_HEAD_SIZES:
            raise ModelError(f"vLLM's CPU attention supports head sizes {', '.join(map(str, CPU_HEAD_SIZES))}; "
                             f"{model.model_id} has {config.head_dim} (try random:tiny-h32 or a real GPT-2)")
        environment = ensure_environment(flavour, progress)
        folder = ensure_model_folder(model, environment, progress)
        threads = self.options.threads or os.cpu_count() or 1
        dtype_name, dtype_bytes = _DTYPES[self.dtype]
        port = free_port()
        binding = cpu_binding(threads) if flavour == "cpu" else ""
        env = {"HF_HUB_OFFLINE": "1", "VLLM_HOST_IP": "127.0.0.1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",
               "VLLM_CACHE_ROOT": str(cache_dir("vllm", "cache")), "OMP_NUM_THREADS": str(threads)}
        if flavour == "cpu":
            env.update(VLLM_CPU_KVCACHE_SPACE=str(KV_CACHE_GB), VLLM_CPU_OMP_THREADS_BIND=binding)
        name = f"whistle-stop-{model.weights_hash}"
        argv = [str(environment.python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(folder.folder),
                "--served-model-name", name, "--host", "127.0.0.1", "--port", str(port), "--dtype", dtype_name,
                "--max-model-len", str(model.context), "--seed", "0"]
        log = cache_dir("vllm", "logs") / f"{self.name}-{port}.log"
        self.server = ManagedServer(ServerCommand(argv, port, env, ready_path="/health", name="vLLM server",
                                                  log_path=log))
        start_s = self.server.start(START_TIMEOUT_S, progress)
        self.client = RemoteEngine(self.name, EngineOptions(self.options.threads, settings=RemoteOptions(
            url=f"{self.server.base_url}/v1", model=name)))
        client_info = self.client.load(model, progress)
        build_s = environment.build_s + folder.build_s
        cache = "miss" if environment.cache_state == "miss" or folder.cache_state == "miss" else "hit"
        notes = [environment.description, f"dtype {dtype_name}",
                 f"OMP threads bound to CPUs {binding} (VLLM_CPU_OMP_THREADS_BIND), KV cache {KV_CACHE_GB} GiB"
                 if flavour == "cpu" else f"{threads} CPU threads", f"server start {start_s:.1f} s (load, not TTFT)",
                 "CPU ms/token and peak RSS include the server's processes (a sum of each one's peak)",
                 f"server log {log}", *client_notes(client_info.notes)]
        return EngineInfo(device=f"vLLM {environment.version} {flavour} at 127.0.0.1:{port}", dtype=self.dtype,
                          weight_bytes_per_token=config.weight_bytes(dtype_bytes, dtype_bytes),
                          kv_bytes_per_position=config.kv_bytes_per_position(dtype_bytes), build_s=build_s,
                          artifact_cache=cache, samples_natively=True,
                          notes="; ".join(n for n in notes if n))

    def stream(self, token_ids: Sequence[int], new_tokens: int, sampler: Sampler,
               cancel: threading.Event | None = None) -> Iterator[int]:
        try:
            yield from self.client.stream(token_ids, new_tokens, sampler, cancel)
        finally:
            self.run_notes = self.client.run_notes

    def server_metrics(self) -> ServerMetrics | None:
        return self.client.server_metrics() if self.client is not None else None

    def prefill(self, token_ids: Sequence[int]) -> np.ndarray:
        raise NotImplementedError("a vLLM server streams tokens, not logits; use stream()")

    def decode(self, token_id: int) -> np.ndarray:
        raise NotImplementedError("a vLLM server streams tokens, not logits; use stream()")

    def close(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None

