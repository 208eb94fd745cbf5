"""How vLLM's OpenAI server is started for a model: by the `vllm` engine, and by
`bench --serve-cold-start` (which times it beside `whistle-stop serve`, where vLLM's environment is
already made: it never installs ~3.5 GB for a measurement)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from ...machine.gpu import cuda_available
from ...progress import silent
from ...sources.model_files import ModelFiles
from ...storage.paths import cache_dir
from ..server.lifecycle import ServerCommand, ServerUnavailable
from .environment import VllmEnvironment, installed_environment
from .model_folder import ensure_model_folder

KV_CACHE_GB = 1  # VLLM_CPU_KVCACHE_SPACE: plenty for GPT-2 at 8 streams of 1,024 positions
CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)  # vLLM's CPU attention kernels
DTYPES = {"fp32": ("float32", 4), "bf16": ("bfloat16", 2)}


def flavour() -> str:
    return "cuda" if cuda_available() else "cpu"


def head_size_problem(model: ModelFiles, flavour_name: str) -> str:
    head_dim = model.gpt2_config.head_dim
    if flavour_name == "cpu" and head_dim not in CPU_HEAD_SIZES:
        return (
            f"vLLM's CPU attention supports head sizes {', '.join(map(str, CPU_HEAD_SIZES))}; "
            f"{model.model_id} has {head_dim} (try random:tiny-h32 or a real GPT-2)"
        )
    return ""


def cpu_binding(threads: int) -> str:
    """VLLM_CPU_OMP_THREADS_BIND for `threads` threads: the first usable CPUs, as ranges (by
    default vLLM reserves a core for its frontend and leaves one of two cores idle)."""
    usable = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    chosen = usable[: max(1, threads)]
    runs: list[list[int]] = []
    for cpu in chosen:
        if runs and cpu == runs[-1][-1] + 1:
            runs[-1].append(cpu)
        else:
            runs.append([cpu])
    return ",".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in runs)


def server_command(
    model: ModelFiles,
    environment: VllmEnvironment,
    folder: Path,
    flavour_name: str,
    dtype: str,
    threads: int,
    port: int,
    log: Path | None,
    speculative: dict | None = None,
) -> ServerCommand:
    """On 127.0.0.1:`port` with the run's threads (bound to the first usable CPUs on a CPU), dtype,
    a 1 GiB KV cache on a CPU, offline, with a private cache folder; `speculative`: vLLM's
    --speculative-config (its n-gram speculation), if any."""
    env = {
        "HF_HUB_OFFLINE": "1",
        "VLLM_HOST_IP": "127.0.0.1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        "VLLM_CACHE_ROOT": str(cache_dir("vllm", "cache")),
        "OMP_NUM_THREADS": str(threads),
    }
    if flavour_name == "cpu":
        env.update(VLLM_CPU_KVCACHE_SPACE=str(KV_CACHE_GB), VLLM_CPU_OMP_THREADS_BIND=cpu_binding(threads))
    name = f"whistle-stop-{model.weights_hash}"
    argv = [
        str(environment.python),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(folder),
        "--served-model-name",
        name,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--dtype",
        DTYPES[dtype][0],
        "--max-model-len",
        str(model.context),
        "--seed",
        "0",
    ]
    if speculative:
        argv += ["--speculative-config", json.dumps(speculative)]
    return ServerCommand(argv, port, env, ready_path="/health", name="vLLM server", log_path=log, served_model=name)


def own_server(model: ModelFiles, port: int, threads: int, dtype: str = "fp32") -> ServerCommand:
    """vLLM's server for `model` where its environment exists (ServerUnavailable otherwise)."""
    flavour_name = flavour()
    problem = head_size_problem(model, flavour_name)
    if problem:
        raise ServerUnavailable(problem)
    environment = installed_environment(flavour_name)
    if environment is None:
        raise ServerUnavailable("vLLM's environment is not made yet (the vllm engine makes it on first use)")
    folder = ensure_model_folder(model, environment, silent).folder
    return server_command(model, environment, folder, flavour_name, dtype, threads, port, None)
