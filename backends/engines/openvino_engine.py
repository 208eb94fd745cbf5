"""OpenVINO Runtime on our own GPT-2 graph, built with OpenVINO's opset API from the safetensors.

No torch and no nncf: the graph is written op by op, the KV cache is moved inside the model
(OpenVINO's make-stateful transformation: no cache copied in and out per token), and int8 weights are
stored the way NNCF stores them (int8 constant -> Convert -> Multiply by a per-row scale), a
pattern the CPU plugin runs as weight-compressed matmuls. The IR is cached per weights hash.
Settings measured here: the CPU plugin defaults to bf16, so f32 is asked for explicitly; the
stateful KV cache defaults to u8, so f32 is asked for too; DYNAMIC_QUANTIZATION_GROUP_SIZE=0
keeps activations in fp32 for int8 weights (OpenVINO's default, 32, quantises them too).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import openvino as ov
import openvino.opset13 as ops

from ..engine import Engine, EngineInfo, EngineOptions
from ..gpt2_config import GPT2Config
from ..sources.model_files import ModelFiles
from ..sources.weights import mmap_numpy
from ..storage import artifact_cache
from .artifact_folders import OPENVINO_KIND

FORMAT = "ov-gpt2-3"
_BEAM = np.zeros(1, dtype=np.int32)  # batch 1: keep the one cached sequence


class OpenVinoEngine(Engine):
    def __init__(self, name: str, options: EngineOptions, weight_format: str = "fp32") -> None:
        super().__init__(name, options)
        if weight_format not in ("fp32", "int8"):
            raise ValueError(f"unsupported OpenVINO weight format {weight_format!r}")
        self.weight_format = weight_format
        self.request = None
        self.position = 0
        self.folder: Path | None = None

    def load(self, model: ModelFiles, progress) -> EngineInfo:
        config = model.gpt2_config.require_supported(self.name)
        threads = self.options.threads or os.cpu_count() or 1
        artefact = artifact_cache.ensure(
            OPENVINO_KIND,
            model.weights_hash,
            self.weight_format,
            lambda out: _build(model, out, self.weight_format, progress),
            progress,
            meta={"format": FORMAT, "openvino": ov.get_version(), "weights": self.weight_format},
        )
        self.folder = artefact.folder
        settings = {
            "INFERENCE_PRECISION_HINT": "f32",
            "KV_CACHE_PRECISION": "f32",
            "PERFORMANCE_HINT": "LATENCY",
            "NUM_STREAMS": "1",
            "INFERENCE_NUM_THREADS": str(threads),
            "DYNAMIC_QUANTIZATION_GROUP_SIZE": "0",
        }
        core = ov.Core()
        compiled = core.compile_model(core.read_model(self.folder / "model.xml"), "CPU", settings)
        self.request = compiled.create_infer_request()
        self._compile_settings = settings
        self.context = config.n_positions
        notes = [
            f"threads={threads}",
            f"openvino {ov.get_version().split('-')[0]}",
            "stateful KV cache",
            f"precision {_name(compiled.get_property('INFERENCE_PRECISION_HINT'))}",
            f"kv cache {_name(compiled.get_property('KV_CACHE_PRECISION'))}",
        ]
        if self.weight_format == "int8":
            notes.append("int8 weights per output row, activations fp32 (DYNAMIC_QUANTIZATION_GROUP_SIZE=0)")
        return EngineInfo(
            device="cpu",
            dtype=self.weight_format,
            weight_bytes_per_token=stored_weight_bytes(self.folder, config),
            kv_bytes_per_position=config.kv_bytes_per_position(4),  # KV_CACHE_PRECISION f32
            build_s=artefact.build_s,
            artifact_cache=artefact.cache_state,
            notes="; ".join(notes),
        )

    def _infer(self, token_ids: Sequence[int]) -> np.ndarray:
        count = len(token_ids)
        if self.position + count > self.context:
            raise ValueError(f"sequence of {self.position + count} tokens exceeds the context of {self.context}")
        ids = np.asarray([token_ids], dtype=np.int64)
        positions = np.arange(self.position, self.position + count, dtype=np.int64)[None]
        self.request.infer({"input_ids": ids, "position_ids": positions, "beam_idx": _BEAM})
        self.position += count
        return np.array(self.request.get_tensor("logits").data[0], dtype=np.float32)

    def prefill(self, token_ids: Sequence[int]) -> np.ndarray:
        self.request.reset_state()  # drops the previous sequence's KV cache
        self.position = 0
        return self._infer(list(token_ids))

    def decode(self, token_id: int) -> np.ndarray:
        return self._infer([int(token_id)])

    def profiler(self):
        """OpenVINO's performance counters, on a second compiled model for the profiled run."""
        from ..profilers.openvino_counters import OpenVinoCounters

        def open_profiled():
            core = ov.Core()
            settings = {**self._compile_settings, "PERF_COUNT": "YES"}
            compiled = core.compile_model(core.read_model(self.folder / "model.xml"), "CPU", settings)
            return compiled.create_infer_request()

        def use(request) -> None:
            self.request = request  # the next prefill resets its state

        return OpenVinoCounters(open_profiled, use, self.request)

    def close(self) -> None:
        self.request = None


def stored_weight_bytes(folder: Path, config: GPT2Config) -> int:
    """Weights one decode step reads, at their stored size: the IR's constants (model.bin: int8
    weights with their fp32 scales, biases, norms; the tied table once, shared by the embedding
    and the lm_head) less the position table, of which a step reads one row."""
    position_table = config.n_positions * config.n_embd * 4
    return max(0, (folder / "model.bin").stat().st_size - position_table)


def _name(value: object) -> str:
    return value.to_string() if hasattr(value, "to_string") else str(value)


def _build(model: ModelFiles, out: Path, weight_format: str, progress) -> None:
    progress(f"building the OpenVINO {weight_format} model", None)
    graph = build_graph(mmap_numpy(model.safetensors), model.gpt2_config, weight_format == "int8")
    ov.save_model(graph, out / "model.xml", compress_to_fp16=False)  # the default would halve fp32


class _Weights:
    """Constants for the graph: fp32 as is, or int8 per output row with an fp32 scale."""

    def __init__(self, tensors: dict[str, np.ndarray], int8: bool) -> None:
        self.tensors, self.int8 = tensors, int8

    def vector(self, name: str) -> ov.Node:
        return ops.constant(np.ascontiguousarray(self.tensors[name], dtype=np.float32))

    def matrix(self, name: str, transpose: bool = True) -> ov.Node:
        """A matrix [out, in] for matmul(x, W, transpose_b=True); HF Conv1D stores [in, out]."""
        w = np.asarray(self.tensors[name], dtype=np.float32)
        return self.compressed(np.ascontiguousarray(w.T if transpose else w))

    def compressed(self, w: np.ndarray) -> ov.Node:
        if not self.int8:
            return ops.constant(w)
        q, scale = quantize_rows(w)
        return ops.multiply(ops.convert(ops.constant(q), "f32"), ops.constant(scale))


def quantize_rows(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric int8 per output row: w ~= q * scale."""
    scale = np.abs(w).max(axis=1, keepdims=True) / 127.0
    scale[scale == 0] = 1.0
    q = np.clip(np.rint(w / scale), -127, 127).astype(np.int8)
    return q, scale.astype(np.float32)


def _layer_norm(x: ov.Node, w: _Weights, prefix: str, eps: float) -> ov.Node:
    norm = ops.mvn(x, ops.constant(np.array([-1], dtype=np.int64)), True, eps, "inside_sqrt")
    return ops.add(ops.multiply(norm, w.vector(f"{prefix}.weight")), w.vector(f"{prefix}.bias"))


def _linear(x: ov.Node, w: _Weights, prefix: str) -> ov.Node:
    return ops.add(ops.matmul(x, w.matrix(f"{prefix}.weight"), False, True), w.vector(f"{prefix}.bias"))


def _i64(*values: int) -> ov.Node:
    return ops.constant(np.array(values, dtype=np.int64))


def build_graph(tensors: dict[str, np.ndarray], config: GPT2Config, int8: bool) -> ov.Model:
    """GPT-2 with inputs input_ids/position_ids [1, T], output logits [1, vocab] of the last
    position, and the KV cache of every layer kept in the model's state."""
    config.require_supported("the OpenVINO graph")
    d, heads, layers = config.n_embd, config.n_head, config.n_layer
    eps, head_dim = config.layer_norm_epsilon, config.head_dim
    w = _Weights(tensors, int8)
    input_ids = ops.parameter([1, -1], np.int64, name="input_ids")
    position_ids = ops.parameter([1, -1], np.int64, name="position_ids")
    table, scale = _tied_table(w)
    x = ops.add(_embed(table, scale, input_ids), ops.gather(w.vector("wpe.weight"), position_ids, 0))
    positions = ops.squeeze(position_ids, _i64(0))  # [T]
    # The CPU plugin fuses ReadValue -> Gather(beam_idx) -> Concat -> SDPA into one attention
    # node with an in-place KV cache; without the Gather (as optimum-intel emits it) it does not.
    beam_idx = ops.parameter([-1], np.int32, name="beam_idx")
    pasts, presents = [], []
    for i in range(layers):
        p = f"h.{i}"
        qkv = _linear(_layer_norm(x, w, f"{p}.ln_1", eps), w, f"{p}.attn.c_attn")
        q, k, v = (_heads(part, heads, head_dim) for part in ops.split(qkv, 2, 3).outputs())
        attended = []
        for kind, new in (("key", k), ("value", v)):
            past = ops.parameter([1, heads, -1, head_dim], np.float32, name=f"past.{i}.{kind}")
            full = ops.concat([ops.gather(past, beam_idx, 0), new], 2)
            result = ops.result(full, name=f"present.{i}.{kind}")
            pasts.append(past)
            presents.append(result)
            attended.append(full)
        mask = _causal_mask(positions, attended[0])
        a = ops.scaled_dot_product_attention(q, attended[0], attended[1], mask)
        a = ops.reshape(ops.transpose(a, _i64(0, 2, 1, 3)), _i64(1, -1, d), False)
        x = ops.add(x, _linear(a, w, f"{p}.attn.c_proj"))
        h = _layer_norm(x, w, f"{p}.ln_2", eps)
        h = ops.gelu(_linear(h, w, f"{p}.mlp.c_fc"), "tanh")  # every admitted activation is the tanh form
        x = ops.add(x, _linear(h, w, f"{p}.mlp.c_proj"))
    last = ops.gather(x, _i64(-1), 1)  # only the last position needs the 50k-wide lm_head
    last = _layer_norm(last, w, "ln_f", eps)
    logits = ops.reshape(ops.matmul(last, _lm_head(table, scale), False, True), _i64(1, -1), False)
    logits_result = ops.result(logits, name="logits")
    logits_result.output(0).get_tensor().set_names({"logits"})
    model = ov.Model([logits_result, *presents], [input_ids, position_ids, beam_idx, *pasts], "whistle-stop-gpt2")
    for node in presents:
        node.output(0).get_tensor().set_names({node.get_friendly_name()})
    from openvino._offline_transformations import apply_make_stateful_transformation

    apply_make_stateful_transformation(
        model, {p.get_friendly_name(): r.get_friendly_name() for p, r in zip(pasts, presents)}
    )
    # An empty cache as each state's initial value (as optimum-intel does): the CPU plugin's
    # fused attention with an in-place KV cache needs ReadValue to have an initialiser.
    empty = ops.broadcast(ops.constant(np.float32(0)), _i64(1, heads, 0, head_dim))
    for op in model.get_ops():
        if op.get_type_name() == "ReadValue":
            op.set_arguments([empty])
    model.validate_nodes_and_infer_types()
    return model


def _tied_table(w: _Weights) -> tuple[ov.Node, ov.Node | None]:
    """wte [vocab, d] once, shared by the embedding and the lm_head (int8: rows and their scales)."""
    table = np.ascontiguousarray(w.tensors["wte.weight"], dtype=np.float32)
    if not w.int8:
        return ops.constant(table), None
    q, scale = quantize_rows(table)
    return ops.constant(q), ops.constant(scale)


def _embed(table: ov.Node, scale: ov.Node | None, input_ids: ov.Node) -> ov.Node:
    rows = ops.gather(table, input_ids, 0)
    if scale is None:
        return rows
    return ops.multiply(ops.convert(rows, "f32"), ops.gather(scale, input_ids, 0))


def _lm_head(table: ov.Node, scale: ov.Node | None) -> ov.Node:
    return table if scale is None else ops.multiply(ops.convert(table, "f32"), scale)


def _heads(x: ov.Output, heads: int, head_dim: int) -> ov.Node:
    """[1, T, d] -> [1, heads, T, head_dim]"""
    return ops.transpose(ops.reshape(x, _i64(1, -1, heads, head_dim), False), _i64(0, 2, 1, 3))


def _causal_mask(positions: ov.Node, keys: ov.Node) -> ov.Node:
    """Boolean [T, S]: query at absolute position p may attend keys 0..p (true = attend)."""
    total = ops.gather(ops.shape_of(keys), _i64(2), 0)
    scalar = lambda value: ops.constant(np.int64(value))  # noqa: E731
    key_positions = ops.range(scalar(0), ops.squeeze(total, _i64(0)), scalar(1), "i64")
    return ops.less_equal(ops.unsqueeze(key_positions, _i64(0)), ops.unsqueeze(positions, _i64(1)))
