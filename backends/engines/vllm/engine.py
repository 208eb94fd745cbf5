"""`vllm` / `vllm-bf16`: a real vLLM OpenAI-compatible server that whistle-stop sets up, starts,
measures through the `remote` engine's client, and always stops.

Load = make (once) vLLM's own environment and a model folder it loads (both reported as build
time), then start the server on 127.0.0.1 on a free port with the run's thread count and dtype
and wait until /health answers (load time). Never TTFT: every run is timed from its own request.
The server lives as long as this engine's worker (repeats and sweep cells reuse it) and runs under
a guard that stops its whole process group when the worker ends, however it ends.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator, Sequence

import numpy as np

from ...engine import EngineInfo, EngineOptions, ServerEngine
from ...errors import ModelError
from ...sampling import Sampler
from ...server_metrics import ServerMetrics
from ...sources.model_files import ModelFiles
from ...speculation import SpeculationStats
from ...storage.paths import cache_dir
from ..remote_engine import CLIENT_USAGE_NOTE, SERVER_SETTINGS_NOTE, RemoteEngine
from ..remote_options import RemoteOptions
from ..server.lifecycle import ManagedServer, free_port
from ..vllm_options import VllmOptions
from .environment import ensure_environment
from .model_folder import ensure_model_folder
from .server_command import DTYPES, KV_CACHE_GB, cpu_binding, head_size_problem, server_command
from .server_command import flavour as server_flavour

START_TIMEOUT_S = 900.0  # a CPU start compiles the decode graph: minutes on a slow machine (docs/engines.md)

__all__ = ["VllmEngine", "cpu_binding", "client_notes"]


def client_notes(notes: str) -> list[str]:
    """The remote client's notes that hold for a server this engine started and sized itself."""
    return [n for n in notes.split("; ") if n not in (CLIENT_USAGE_NOTE, SERVER_SETTINGS_NOTE)]


class VllmEngine(ServerEngine):
    def __init__(self, name: str, options: EngineOptions, dtype: str = "fp32") -> None:
        super().__init__(name, options)
        self.dtype = dtype
        self.settings = options.settings if isinstance(options.settings, VllmOptions) else VllmOptions()
        self._spec_before: ServerMetrics | None = None
        self._streams_shared = False  # a load run's streams are on the server (share_streams)
        self.server: ManagedServer | None = None
        self.client: RemoteEngine | None = None

    def load(self, model: ModelFiles, progress) -> EngineInfo:
        config = model.gpt2_config
        flavour = server_flavour()
        problem = head_size_problem(model, flavour)
        if problem:
            raise ModelError(problem)
        environment = ensure_environment(flavour, progress)
        folder = ensure_model_folder(model, environment, progress)
        threads = self.options.threads or os.cpu_count() or 1
        dtype_name, dtype_bytes = DTYPES[self.dtype]
        port = free_port()
        binding = cpu_binding(threads) if flavour == "cpu" else ""
        log = cache_dir("vllm", "logs") / f"{self.name}-{port}.log"
        speculative = self.settings.speculative_config()
        command = server_command(
            model, environment, folder.folder, flavour, self.dtype, threads, port, log, speculative
        )
        name = command.served_model
        self.server = ManagedServer(command)
        start_s = self.server.start(START_TIMEOUT_S, progress)
        self.client = RemoteEngine(
            self.name,
            EngineOptions(self.options.threads, settings=RemoteOptions(url=f"{self.server.base_url}/v1", model=name)),
        )
        client_info = self.client.load(model, progress)
        build_s = environment.build_s + folder.build_s
        cache = "miss" if environment.cache_state == "miss" or folder.cache_state == "miss" else "hit"
        notes = [
            environment.description,
            f"dtype {dtype_name}",
            f"OMP threads bound to CPUs {binding} (VLLM_CPU_OMP_THREADS_BIND), KV cache {KV_CACHE_GB} GiB"
            if flavour == "cpu"
            else f"{threads} CPU threads",
            f"server start {start_s:.1f} s (load, not TTFT)",
            "CPU ms/token and peak RSS include the server's processes (a sum of each one's peak)",
            f"server log {log}",
            *client_notes(client_info.notes),
        ]
        if speculative:
            notes.append(
                f"vLLM's n-gram speculation: --speculative-config {json.dumps(speculative)} (several tokens per "
                "step; acceptance from the server's spec_decode counters)"
            )
        self._spec_before = self.server_metrics()  # the counters are cumulative: each run takes its part
        return EngineInfo(
            device=f"vLLM {environment.version} {flavour} at 127.0.0.1:{port}",
            dtype=self.dtype,
            weight_bytes_per_token=config.weight_bytes(dtype_bytes, dtype_bytes),
            kv_bytes_per_position=config.kv_bytes_per_position(dtype_bytes),
            build_s=build_s,
            artifact_cache=cache,
            samples_natively=True,
            multi_token_steps=speculative is not None,
            notes="; ".join(n for n in notes if n),
        )

    def stream(
        self, token_ids: Sequence[int], new_tokens: int, sampler: Sampler, cancel: threading.Event | None = None
    ) -> Iterator[int]:
        count = 0
        try:
            for token in self.client.stream(token_ids, new_tokens, sampler, cancel):
                count += 1
                yield token
        finally:
            self.run_notes = self.client.run_notes
            # read after the last token, outside every timed gap (and never while other streams run)
            if self.settings.speculative_config() and not self._streams_shared:
                self.speculation = self._spec_since_last(count)

    def server_metrics(self) -> ServerMetrics | None:
        return self.client.server_metrics() if self.client is not None else None

    def share_streams(self, shared: bool) -> None:
        self._streams_shared = shared
        if not shared and self.settings.speculative_config():
            self._spec_before = self.server_metrics()  # after the round: the next run alone counts from here

    def _spec_since_last(self, tokens: int) -> SpeculationStats | None:
        """This run's part of the server's speculation counters (one stream at a time: bench runs)."""
        before, after = self._spec_before, self.server_metrics()
        self._spec_before = after
        if after is None or after.spec is None:
            return None
        spec = after.spec.minus(before.spec) if before is not None and before.spec is not None else after.spec
        return SpeculationStats(
            tokens=max(0, tokens - 1),
            target_passes=int(spec.drafts),
            drafted=int(spec.draft_tokens),
            accepted=int(spec.accepted_tokens),
        )

    def prefill(self, token_ids: Sequence[int]) -> np.ndarray:
        raise NotImplementedError("a vLLM server streams tokens, not logits; use stream()")

    def decode(self, token_id: int) -> np.ndarray:
        raise NotImplementedError("a vLLM server streams tokens, not logits; use stream()")

    def close(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None
