"""The folder OpenVINO GenAI's LLMPipeline loads, built here without optimum-intel.

optimum-intel pins transformers < 5.6, so instead of `optimum-cli export openvino` this reuses
the project's own stateful GPT-2 graph (openvino_engine.build_graph) and adapts it to what
GenAI's stateful (SDPA) pipeline reads: inputs input_ids, attention_mask, position_ids,
beam_idx and an output `logits` [batch, seq, vocab] (ours holds the last position only, as
GenAI's own slice-before-matmul would make it). The tokenizer and detokenizer come from
openvino_tokenizers.convert_tokenizer on the shipped GPT-2 vocabulary.

Weights without nncf, in the layouts NNCF writes and the CPU plugin runs as weight-compressed
matmuls: int8 is openvino_engine's own (int8 per output row, fp32 scales, the tied table too);
int4 is symmetric i4 in groups of 128 along the input (Constant i4 [out, groups, group] ->
Convert -> Multiply by an fp32 scale [out, groups, 1] -> Reshape [out, in]), with the tied
embedding / lm_head table in int8 per row (NNCF's default keeps those layers 8-bit as well).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import openvino as ov
import openvino.opset13 as ops

from ...gpt2_config import GPT2Config
from ...sources.model_files import ModelFiles
from ...sources.weights import mmap_numpy
from ...storage.paths import TOKENIZER_DIR
from ..openvino_engine import _embed, _i64, _lm_head, build_graph, quantize_rows

FORMAT = "ovgenai-gpt2-1"
MODEL_XML = "openvino_model.xml"
MODEL_BIN = "openvino_model.bin"
INT4_GROUP = 128  # NNCF's default group size
EOS_ID = 50256


def build(model: ModelFiles, out: Path, weight_format: str, progress) -> dict:
    """Fill `out` with openvino_model.xml/.bin, openvino_(de)tokenizer.xml/.bin, config.json and
    generation_config.json."""
    progress(f"building the OpenVINO GenAI {weight_format} model", None)
    config = model.gpt2_config
    tensors = mmap_numpy(model.safetensors)
    keep: list[ov.Tensor] = []  # int4 constants share memory with these until the model is saved
    graph = build_graph(tensors, config, weight_format == "int8")
    if weight_format == "int4":
        compress_int4(graph, config, keep)
    adapt_for_genai(graph)
    ov.save_model(graph, out / MODEL_XML, compress_to_fp16=False)  # the default would halve fp32
    del graph, keep
    progress("converting the GPT-2 tokenizer to OpenVINO", None)
    write_tokenizers(out)
    shutil.copyfile(model.folder / "config.json", out / "config.json")
    (out / "generation_config.json").write_text(
        json.dumps({"bos_token_id": EOS_ID, "eos_token_id": EOS_ID, "do_sample": False}, indent=1)
    )
    import openvino_tokenizers

    return {
        "openvino_tokenizers": openvino_tokenizers.__version__,
        "int4_group": INT4_GROUP if weight_format == "int4" else None,
    }


def adapt_for_genai(model: ov.Model) -> None:
    """Our graph -> GenAI's interface: add an `attention_mask` input (batch 1 needs none: the
    causal mask comes from position_ids) and make `logits` [1, 1, vocab]."""
    result = next(
        r for r in model.get_results() if "logits" in r.output(0).get_names() or r.get_friendly_name() == "logits"
    )
    source = result.input_value(0)
    source.get_tensor().set_names(set())
    logits = ops.unsqueeze(source, _i64(1))
    result.input(0).replace_source_output(logits.output(0))
    logits.output(0).get_tensor().set_names({"logits"})
    mask = ops.parameter([-1, -1], np.int64, name="attention_mask")
    mask.output(0).get_tensor().set_names({"attention_mask"})
    model.add_parameters([mask])
    model.validate_nodes_and_infer_types()


def write_tokenizers(out: Path) -> None:
    """openvino_tokenizer / openvino_detokenizer from the shipped vocab.json + merges.txt. (With
    transformers 5, GPT2TokenizerFast(vocab_file=, merges_file=) builds an empty tokenizer: the
    files go in as vocab= / merges=.)"""
    import openvino_tokenizers
    from transformers import GPT2TokenizerFast

    hf = GPT2TokenizerFast(vocab=str(TOKENIZER_DIR / "vocab.json"), merges=str(TOKENIZER_DIR / "merges.txt"))
    if len(hf) != EOS_ID + 1 or hf.convert_tokens_to_ids("<|endoftext|>") != EOS_ID:
        raise RuntimeError(f"the GPT-2 tokenizer built from {TOKENIZER_DIR} has {len(hf)} tokens, not 50257")
    tokenizer, detokenizer = openvino_tokenizers.convert_tokenizer(hf, with_detokenizer=True)
    ov.save_model(tokenizer, out / "openvino_tokenizer.xml")
    ov.save_model(detokenizer, out / "openvino_detokenizer.xml")


def compress_int4(model: ov.Model, config: GPT2Config, keep: list) -> None:
    """fp32 graph -> int4 linears (symmetric, groups of INT4_GROUP) and an int8 tied table."""
    vocab, d = config.vocab_size, config.n_embd
    for op in model.get_ordered_ops():
        if op.get_type_name() != "MatMul":
            continue
        weight = op.input_value(1).get_node()
        if weight.get_type_name() != "Constant":
            continue
        w = weight.get_data()  # [out, in] for matmul(x, W, transpose_b=True)
        if tuple(w.shape) == (vocab, d):
            continue  # the tied table: below, with the embedding
        op.input(1).replace_source_output(int4_weight(np.asarray(w, dtype=np.float32), keep).output(0))
    _compress_tied_table(model, vocab, d)
    model.validate_nodes_and_infer_types()


def _compress_tied_table(model: ov.Model, vocab: int, d: int) -> None:
    table = next(
        op
        for op in model.get_ordered_ops()
        if op.get_type_name() == "Constant" and tuple(op.get_output_shape(0)) == (vocab, d)
    )
    q, scale = quantize_rows(np.asarray(table.get_data(), dtype=np.float32))
    q_node, scale_node = ops.constant(q), ops.constant(scale)
    for target in list(table.output(0).get_target_inputs()):
        user = target.get_node()
        if user.get_type_name() == "Gather":
            rows = _embed(q_node, scale_node, user.input_value(1))
            for consumer in list(user.output(0).get_target_inputs()):
                consumer.replace_source_output(rows.output(0))
        else:  # the lm_head MatMul
            target.replace_source_output(_lm_head(q_node, scale_node).output(0))


def int4_group(columns: int) -> int:
    for group in (INT4_GROUP, 64, 32, 16):
        if columns % group == 0:
            return group
    return columns


def quantize_int4(w: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Symmetric int4 per group of input columns: w ~= q * scale, q in [-7, 7]. Returns (q int8
    [out, groups, group], scale float32 [out, groups, 1], group)."""
    rows, columns = w.shape
    group = int4_group(columns)
    grouped = w.reshape(rows, columns // group, group)
    scale = np.abs(grouped).max(axis=2, keepdims=True) / 7.0
    scale[scale == 0] = 1.0
    q = np.clip(np.rint(grouped / scale), -7, 7).astype(np.int8)
    return q, scale.astype(np.float32), group


def int4_weight(w: np.ndarray, keep: list) -> ov.Node:
    q, scale, _ = quantize_int4(w)
    tensor = ov.Tensor(ov.Type.i4, ov.Shape(list(q.shape)))
    flat = np.append(q.reshape(-1), np.int8(0)) if q.size % 2 else q.reshape(-1)
    packed = ((flat[0::2] & 0xF) | ((flat[1::2] & 0xF) << 4)).astype(np.uint8)  # low nibble first
    tensor.data[:] = packed.view(np.int8)[: tensor.data.size].reshape(tensor.data.shape)
    keep.append(tensor)
    dequantised = ops.multiply(ops.convert(ops.constant(tensor), "f32"), ops.constant(scale))
    return ops.reshape(dequantised, _i64(*w.shape), False)


def stored_weight_bytes(folder: Path, config: GPT2Config) -> int:
    """Weights one decode step reads, at their stored size (openvino_model.bin's constants, less
    the position table, of which a step reads one row)."""
    position_table = config.n_positions * config.n_embd * 4
    return max(0, (folder / MODEL_BIN).stat().st_size - position_table)
