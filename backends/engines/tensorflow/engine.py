"""TensorFlow 2 GPT-2 with a past-state cache (engines `tf` and `tf-xla`).

OpenAI's original gpt-2 code needs TensorFlow 1.x (Python <= 3.7), which cannot be installed
here; this is its structure in TF 2 (model.py), on the same safetensors as every other engine.
Each token is one call of one tf.function with fixed input shapes (token, position), traced once.
`tf` runs it as a plain graph (attention over the filled part of the cache: a dynamic slice);
`tf-xla` compiles it with XLA (jit_compile=True; attention over the whole cache, masked, since
XLA needs static shapes). Prefill stays a plain graph in both (one trace for any prompt length).
The traces, and for tf-xla the compile, happen in load() with a warm-up, so they count in load time.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Sequence

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before tensorflow is imported (by .model)

import numpy as np  # noqa: E402

from ...engine import Engine, EngineInfo, EngineOptions  # noqa: E402
from ...errors import UsageError  # noqa: E402
from ...machine.threads import default_threads  # noqa: E402
from ...sources.model_files import ModelFiles  # noqa: E402
from .model import GPT2, load_variables  # noqa: E402  (imports tensorflow: counted as import time)


def set_threads(threads: int) -> tuple[int, int, str]:
    """TF's intra-op pool (the matmuls) to `threads` (0: the physical cores) and one inter-op
    thread (one sequence: ops run one after another). TF fixes both when its runtime starts, so
    this must come before any op; later (a second engine in one process) they stay as they are."""
    import tensorflow as tf

    wanted = threads if threads > 0 else default_threads()
    threading = tf.config.threading
    try:
        threading.set_intra_op_parallelism_threads(wanted)
        threading.set_inter_op_parallelism_threads(1)
        note = ""
    except RuntimeError:  # the runtime already started in this process
        note = " (set earlier in this process)"
    return threading.get_intra_op_parallelism_threads(), threading.get_inter_op_parallelism_threads(), note


def keep_on_the_cpu_at_fp32() -> None:
    """What the records say (device cpu, fp32) holds with a GPU build of TensorFlow too: no GPU is
    visible, and float32 products are not TF32's (on by default). Before any op, as the threads."""
    import tensorflow as tf

    with contextlib.suppress(RuntimeError, ValueError):  # the runtime already started in this process
        tf.config.set_visible_devices([], "GPU")
    tf.config.experimental.enable_tensor_float_32_execution(False)


class TFEngine(Engine):
    def __init__(self, name: str, options: EngineOptions, xla: bool = False) -> None:
        super().__init__(name, options)
        self.xla = xla
        self.model = None
        self._length = 0  # positions filled in the cache

    def load(self, model: ModelFiles, progress) -> EngineInfo:
        if (self.options.device or "cpu") != "cpu":
            raise UsageError(f"{self.name} runs on the CPU only (tensorflow-cpu), not {self.options.device!r}")
        config = model.gpt2_config.require_supported(self.name)
        intra, inter, threads_note = set_threads(self.options.threads)  # before any op runs
        keep_on_the_cpu_at_fp32()
        import tensorflow as tf

        progress("loading safetensors", None)
        self.model = GPT2(load_variables(model.safetensors), config, xla=self.xla)
        progress("tracing" + (" and XLA-compiling" if self.xla else "") + " the decode step", None)
        started = time.perf_counter()
        self.prefill([0])  # traces prefill (any length) and decode; XLA compiles here
        self.decode(0)
        self._length = 0
        warm_s = time.perf_counter() - started
        notes = [
            f"TensorFlow {tf.__version__}",
            "decode: one tf.function per token, "
            + (
                f"XLA (jit_compile), masked attention over the whole {config.n_positions}-slot cache"
                if self.xla
                else "plain graph, attention over the filled cache slots"
            ),
            "prefill: plain graph" + (" (not XLA)" if self.xla else ""),
            f"static KV cache {config.n_positions} positions",
            f"trace{'+compile' if self.xla else ''}_s={warm_s:.2f}",
            f"threads={intra} (inter-op {inter}){threads_note}",
        ]
        return EngineInfo(
            device="cpu",
            dtype="fp32",
            weight_bytes_per_token=config.weight_bytes(4),
            kv_bytes_per_position=config.kv_bytes_per_position(4),
            notes="; ".join(notes),
        )

    def prefill(self, token_ids: Sequence[int]) -> np.ndarray:
        count = len(token_ids)
        if not 0 < count <= self.model.max_seq:
            raise UsageError(f"prompt of {count} tokens; this model takes 1 to {self.model.max_seq}")
        logits = self.model.prefill_fn(np.asarray(token_ids, dtype=np.int32))  # rewrites slots 0..count-1
        self._length = count
        return logits.numpy()

    def decode(self, token_id: int) -> np.ndarray:
        pos = self._length
        if pos >= self.model.max_seq:
            raise UsageError(f"the context is full ({self.model.max_seq} tokens); cannot decode further")
        logits = self.model.decode_fn(np.int32(token_id), np.int32(pos))
        self._length = pos + 1
        return logits.numpy()

    def forward_logits(self, token_ids: Sequence[int]) -> np.ndarray:
        if not 0 < len(token_ids) <= self.model.max_seq:
            raise UsageError(f"cannot score {len(token_ids)} tokens; this model takes 1 to {self.model.max_seq}")
        return self.model.forward_fn(np.asarray(token_ids, dtype=np.int32)).numpy()

    def close(self) -> None:
        self.model = None
