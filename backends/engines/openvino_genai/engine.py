"""OpenVINO GenAI's LLMPipeline, driven with token ids and a token streamer.

The model folder is built here (build.py: our own stateful GPT-2 IR plus the OpenVINO tokenizer,
no optimum-intel) and cached per weights hash. `generate` runs GenAI's own loop (its sampler,
its KV cache) and blocks, so it runs on a thread; a StreamerBase subclass receives each token id
as GenAI samples it and hands it over a queue, and this generator yields it: tokens are stamped
as ids arrive, never as text (GenAI's detokenizing streamer holds the first piece of text back
well after its own TTFT). Greedy is GenAI's argmax, the same as the shared sampler's;
sampling is GenAI's own sampler with the same settings, and the run's notes say so.

Settings measured or documented: the CPU plugin runs "fp32" in bf16 where the CPU has
AVX512-BF16, so f32 is asked for explicitly (and `openvino-genai-bf16` asks for bf16); the
stateful KV cache defaults to u8, so f32 is asked for too (u8 broke greedy parity with
transformers after ~10 tokens on random:tiny); the PagedAttention backend GenAI prefers on CPU
crashes on our graph, so ATTENTION_BACKEND=SDPA (the stateful pipeline, the KV cache inside the
model as in the `openvino` engine); DYNAMIC_QUANTIZATION_GROUP_SIZE=0 keeps activations fp32
for compressed weights, as `openvino-int8` does.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import openvino as ov
import openvino_genai

from ...engine import Capabilities, Engine, EngineInfo, EngineOptions, StampedToken
from ...machine.threads import default_threads
from ...sampling import Sampler, SamplingParams
from ...sources.model_files import ModelFiles
from ...storage import artifact_cache
from ..artifact_folders import OPENVINO_GENAI_KIND
from ..threaded_generate import tokens_from_thread
from . import build as builder

WEIGHT_FORMATS = ("fp32", "int8", "int4")
PRECISIONS = ("f32", "bf16")
_DONE = object()


class OpenVinoGenAIEngine(Engine):
    capabilities = Capabilities(own_loop=True)  # the LLMPipeline's own loop makes the tokens

    def __init__(
        self, name: str, options: EngineOptions, weight_format: str = "fp32", inference_precision: str = "f32"
    ) -> None:
        super().__init__(name, options)
        if weight_format not in WEIGHT_FORMATS:
            raise ValueError(f"unsupported OpenVINO GenAI weight format {weight_format!r}")
        if inference_precision not in PRECISIONS:
            raise ValueError(f"unsupported OpenVINO GenAI inference precision {inference_precision!r}")
        self.weight_format = weight_format
        self.inference_precision = inference_precision
        self.pipeline = None
        self.folder: Path | None = None

    def load(self, model: ModelFiles, progress) -> EngineInfo:
        config = model.gpt2_config.require_supported(self.name)
        threads = self.options.threads or default_threads()
        version = openvino_genai.__version__.split("-")[0]
        artefact = artifact_cache.ensure(
            OPENVINO_GENAI_KIND,
            model.weights_hash,
            self.weight_format,
            lambda out: builder.build(model, out, self.weight_format, progress),
            progress,
            meta={
                "format": builder.FORMAT,
                "openvino": ov.get_version(),
                "openvino_genai": openvino_genai.__version__,
                "weights": self.weight_format,
            },
        )
        self.folder = artefact.folder
        settings = {
            "INFERENCE_PRECISION_HINT": self.inference_precision,
            "KV_CACHE_PRECISION": "f32",
            "INFERENCE_NUM_THREADS": threads,
            "PERFORMANCE_HINT": "LATENCY",
            "NUM_STREAMS": 1,
            "ATTENTION_BACKEND": "SDPA",
        }
        if self.weight_format != "fp32":
            settings["DYNAMIC_QUANTIZATION_GROUP_SIZE"] = 0
        progress("opening the OpenVINO GenAI pipeline", None)
        self.pipeline = openvino_genai.LLMPipeline(str(self.folder), "CPU", **settings)
        precision = self.inference_precision
        notes = [
            f"openvino-genai {version}",
            f"weights {self.weight_format}",
            f"INFERENCE_PRECISION_HINT={precision}",
            "kv cache f32",
            f"threads={threads}",
            "stateful SDPA pipeline",
            "tokens from GenAI's own loop; stamped per token",
        ]
        if precision == "bf16" and "BF16" not in ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES"):
            precision = "f32"
            notes.append("this CPU has no bf16: the plugin runs f32")
        if self.weight_format == "int8":
            notes.append("int8 weights per output row, activations fp32")
        elif self.weight_format == "int4":
            notes.append(
                f"int4 weights (symmetric, groups of {builder.INT4_GROUP}), tied embedding/lm_head int8, "
                "activations fp32"
            )
        return EngineInfo(
            device="cpu",
            dtype=self.weight_format if self.weight_format != "fp32" else ("bf16" if precision == "bf16" else "fp32"),
            weight_bytes_per_token=builder.stored_weight_bytes(self.folder, config),
            kv_bytes_per_position=config.kv_bytes_per_position(4),  # KV_CACHE_PRECISION f32
            build_s=artefact.build_s,
            artifact_cache=artefact.cache_state,
            samples_natively=True,
            notes="; ".join(notes),
        )

    def generation_config(self, new_tokens: int, params: SamplingParams):
        config = openvino_genai.GenerationConfig()
        config.max_new_tokens = new_tokens
        # no early stop at end-of-text, and end-of-text still a token it may pick, as every engine's:
        # min_new_tokens would mask it (the next-best token where the others emit it)
        config.ignore_eos = True
        config.do_sample = False
        if not params.is_greedy:
            config.do_sample = True
            config.temperature = params.temperature
            config.top_p = params.top_p
            if params.top_k > 0:
                config.top_k = params.top_k
            config.rng_seed = params.seed
        return config

    def stream(
        self, token_ids: Sequence[int], new_tokens: int, sampler: Sampler, cancel: threading.Event | None = None
    ) -> Iterator[StampedToken]:
        params = sampler.params
        self.run_notes = (
            ""
            if params.is_greedy
            else (
                "sampled by OpenVINO GenAI's own sampler (same temperature/top-k/top-p/seed, its own random "
                "numbers: tokens differ from the shared sampler's)"
            )
        )
        config = self.generation_config(new_tokens, params)
        stop = threading.Event()  # the consumer has gone (cancelled, or closed the generator)
        streamer = _TokenStreamer(stop, cancel)
        ids = ov.Tensor(np.asarray([list(token_ids)], dtype=np.int64))
        # GenAI stops at its next token once `stop` is set (the streamer returns CANCEL)
        yield from tokens_from_thread(
            lambda: self.pipeline.generate(ids, config, streamer),
            streamer.tokens,
            _DONE,
            stop,
            new_tokens,
            cancel,
            "openvino-genai-generate",
        )

    def prefill(self, token_ids: Sequence[int]) -> np.ndarray:
        raise NotImplementedError("OpenVINO GenAI keeps its KV cache inside LLMPipeline.generate; use stream()")

    def decode(self, token_id: int) -> np.ndarray:
        raise NotImplementedError("OpenVINO GenAI keeps its KV cache inside LLMPipeline.generate; use stream()")

    def close(self) -> None:
        self.pipeline = None


class _TokenStreamer(openvino_genai.StreamerBase):
    """Each token id onto a queue as GenAI produces it; CANCEL once the consumer stops."""

    def __init__(self, stop: threading.Event, cancel: threading.Event | None) -> None:
        super().__init__()
        self.tokens: queue.SimpleQueue = queue.SimpleQueue()
        self.stop, self.cancel = stop, cancel

    def write(self, token) -> openvino_genai.StreamingStatus:
        for t in token if isinstance(token, (list, tuple)) else (token,):
            self.tokens.put(StampedToken.now(t))
        if self.stop.is_set() or (self.cancel is not None and self.cancel.is_set()):
            return openvino_genai.StreamingStatus.CANCEL
        return openvino_genai.StreamingStatus.RUNNING

    def end(self) -> None:
        pass
