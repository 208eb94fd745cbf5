"""The project's own PyTorch GPT-2 with a static KV cache: fp32, bf16, int8, compiled, CUDA.

Decode avoids per-token Python and allocator work: the cache is preallocated, the token and
position live in two small preallocated tensors filled in place, and the position is tracked
as a Python int (no `.item()` sync). With `compile`, only the one-token decode step is compiled:
on the CPU over the filled cache slots with the length as a symbolic size, on CUDA with fixed
shapes (a masked attention over the whole cache) for CUDA graphs; the compile and a warm-up run
inside `load()`, so their cost shows up in load time and is reported as `compile_s`.
On the CPU, fp32 and bf16 decode their linears with the project's GEMV kernels, and bf16 keeps
only the matrices in bf16 with float32 arithmetic (gemv_linear.py); int8 is torch's dynamic
quantisation.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np
import torch

from ...engine import Engine, EngineInfo, EngineOptions
from ...errors import UsageError
from ...kernels.native import bind_team, build_report
from ...sources.model_files import ModelFiles
from ..torch_util import count_int8_linears, logits_to_numpy, quantize_linear_int8, set_threads
from .gemv_linear import enable_kernels, use_gemv_linears
from .model import GPT2, decode_masked, decode_one, forward_all, load_gpt2, prefill

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "int8": torch.float32}
MATRIX_BYTES = {"fp32": 4, "bf16": 2, "int8": 1}
CUDA_GRAPH_WARMUPS = 3  # cudagraph trees: warm-up run, record, then replay


class TorchStaticEngine(Engine):
    def __init__(
        self, name: str, options: EngineOptions, dtype: str = "fp32", compile: bool = False, device: str | None = None
    ) -> None:
        super().__init__(name, options)
        if dtype not in DTYPES:
            raise UsageError(f"torch-static dtype must be one of {', '.join(DTYPES)}, not {dtype!r}")
        self.dtype = dtype
        self.compile = compile
        self.device = device or options.device or "cpu"  # the registry's kwarg wins over the user's option
        self.model: GPT2 | None = None
        self._decode_compiled = None
        self._length = 0  # positions filled in the cache (a Python int: no device sync)
        self._token: torch.Tensor | None = None  # [1, 1] input id, filled in place
        self._pos: torch.Tensor | None = None  # [1] input position, filled in place

    def _check_device(self) -> torch.device:
        try:
            device = torch.device(self.device)
        except RuntimeError:
            device = None
        if device is None or device.type not in ("cpu", "cuda"):
            raise UsageError(f"{self.name} runs on 'cpu' or 'cuda', not {self.device!r}")
        if device.type == "cuda":
            if not torch.cuda.is_available():
                raise UsageError(
                    f"{self.name} needs a CUDA GPU, but torch {torch.__version__} sees none "
                    "(install a CUDA build of torch on a machine with an NVIDIA GPU)"
                )
            if self.dtype == "int8":
                raise UsageError(f"{self.name}: torch dynamic int8 runs on the CPU only")
        return device

    def load(self, model: ModelFiles, progress) -> EngineInfo:
        device = self._check_device()
        threads = set_threads(self.options.threads)
        torch.set_grad_enabled(False)
        config = model.gpt2_config.require_supported(self.name)
        progress("loading safetensors", None)
        net = load_gpt2(model.safetensors, config, DTYPES[self.dtype], device)
        notes = []
        if self.dtype == "int8":
            quantize_linear_int8(net)
            notes.append(f"{count_int8_linears(net)} int8 linears")
        elif device.type == "cpu":
            progress("building the GEMV kernels", None)
            notes.append(f"{use_gemv_linears(net)} linears")
            if self.dtype == "bf16":
                notes.append("bf16 weights; float32 activations, norms and KV cache")
            notes.append(enable_kernels())
        with torch.inference_mode():
            net.setup_caches()
            self._token = torch.zeros((1, 1), dtype=torch.long, device=device)
            self._pos = torch.zeros((1,), dtype=torch.long, device=device)
        self.model = net
        notes.append(f"static KV cache {net.max_seq} positions")
        if self.compile:
            progress("compiling the decode step (torch.compile)", None)
            notes.append(self._compile(device))
        else:
            notes.append("eager")
        if device.type == "cuda":
            notes.append(torch.cuda.get_device_name(device))
        # once compiled (its workers keep every CPU): torch's OpenMP team one thread to a CPU, as the
        # native engines' (kernels.native.bind_team; 6 of 16 short runs spiked +10 ms unbound, none bound)
        bound = device.type == "cpu" and self.options.owns_process and bind_team(threads)
        notes.append(f"threads={threads}" + (", each bound to a CPU of its own" if bound else ""))
        build_s, cache_state = build_report("gemv")  # "none" where the own GEMV kernel is not used
        cache_dtype = net.h[0].attn.kv_cache.k.dtype
        other_bytes = torch.finfo(net.ln_f.weight.dtype).bits // 8  # norms, biases, positions
        return EngineInfo(
            device=device.type,
            dtype=self.dtype,
            weight_bytes_per_token=config.weight_bytes(MATRIX_BYTES[self.dtype], other_bytes),
            kv_bytes_per_position=config.kv_bytes_per_position(cache_dtype.itemsize),
            notes="; ".join(notes),
            build_s=build_s,
            artifact_cache=cache_state,
        )

    def _compile(self, device: torch.device) -> str:
        """Compile decode and run it until it is warm (and captured, on CUDA); return a note."""
        if device.type == "cuda":
            # The cache is mutated inside the graph and the inputs are refilled in place: fixed
            # addresses let the CUDA graphs keep them instead of copying (or skipping capture).
            for tensor in [*self.model.buffers(), self._token, self._pos]:
                torch._dynamo.mark_static_address(tensor)
            # reduce-overhead = CUDA graphs: one replay per token instead of ~150 kernel launches.
            self._decode_compiled = torch.compile(decode_masked, mode="reduce-overhead", fullgraph=True)
            warmups, how = range(CUDA_GRAPH_WARMUPS), "mode=reduce-overhead (CUDA graphs)"
        else:
            # Only the filled slots, with the length as a symbolic size: one graph for every
            # position (the masked whole-cache form read all 1,024 slots per layer per token).
            # The matrices are the GEMV kernel's op; inductor fuses what lies between them.
            # Dynamic shapes specialise a length of 1 and the full cache (the slice is then the
            # whole buffer): warming those and one general length compiles every graph now.
            self._decode_compiled = torch.compile(decode_one, fullgraph=True, dynamic=True)
            warmups, how = [0, 1, self.model.max_seq - 1], "inductor, dynamic cache length"
        started = time.perf_counter()
        with torch.inference_mode():
            for step in warmups:  # stale cache slots are harmless: prefill starts at 0
                self._token.fill_(0)
                self._pos.fill_(step)
                logits_to_numpy(self._decode(step, compiling=True))  # .cpu() syncs
        self._length = 0
        return f"compiled decode, {how}; compile_s={time.perf_counter() - started:.2f}"

    @torch.inference_mode()
    def prefill(self, token_ids: Sequence[int]) -> np.ndarray:
        count = len(token_ids)
        if not 0 < count <= self.model.max_seq:
            raise UsageError(f"prompt of {count} tokens; this model takes 1 to {self.model.max_seq}")
        ids = torch.tensor([list(token_ids)], dtype=torch.long, device=self._token.device)
        logits = prefill(self.model, ids)  # rewrites cache slots 0..count-1; later ones are masked
        self._length = count
        return logits_to_numpy(logits[0])

    @torch.inference_mode()
    def decode(self, token_id: int) -> np.ndarray:
        pos = self._length
        if pos >= self.model.max_seq:
            raise UsageError(f"the context is full ({self.model.max_seq} tokens); cannot decode further")
        self._token.fill_(token_id)
        self._pos.fill_(pos)
        logits = self._decode(pos)
        self._length = pos + 1
        return logits_to_numpy(logits[0])

    def _decode(self, pos: int, compiling: bool = False) -> torch.Tensor:
        """One step with the token and position already in place. -> [1, V]"""
        if self._decode_compiled is None:
            return decode_one(self.model, self._token, self._pos, kv_len=pos + 1)
        if self.device.startswith("cuda"):  # fixed shapes for CUDA graphs
            return self._decode_compiled(self.model, self._token, self._pos)
        # Only the guards that tell the three graphs apart (kv_len 1, the full cache, any other)
        # are checked: dynamo's full check of every parameter is a large part of a token, and nothing
        # it guards (the module, its weights, the buffers' addresses) changes after load.
        with torch.compiler.set_stance(skip_guard_eval_unsafe=not compiling):
            return self._decode_compiled(self.model, self._token, self._pos, pos + 1)

    @torch.inference_mode()
    def forward_logits(self, token_ids: Sequence[int]) -> np.ndarray:
        if not 0 < len(token_ids) <= self.model.config.n_positions:
            raise UsageError(
                f"cannot score {len(token_ids)} tokens; this model takes 1 to {self.model.config.n_positions}"
            )
        ids = torch.tensor([list(token_ids)], dtype=torch.long, device=self._token.device)
        return logits_to_numpy(forward_all(self.model, ids))

    def profiler(self):
        """torch.profiler: every aten op's self time, per prefill / decode step."""
        from ...profilers.torch_ops import TorchProfiler

        return TorchProfiler()

    def close(self) -> None:
        self.model = None
        self._decode_compiled = None
        if self.device.startswith("cuda") and torch.cuda.is_available():
            torch.cuda.empty_cache()  # hand the cache and any CUDA graph pools back
