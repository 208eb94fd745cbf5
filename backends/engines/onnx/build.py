"""Build one ONNX artefact in a child process: `python -m whistle_stop.backends.engines.onnx.build ...`.

A separate process because exporting imports torch and holds the fp32 weights several times
over (~1.2 GB peak for GPT-2 small); the engine's worker then never imports torch and its peak
RSS is that of the session alone, on the first load as on every later one.

Progress goes to the parent as JSON lines on the original stdout; anything the libraries print
is sent to stderr. The child exits when its stdin closes, so a worker killed mid-export (the
user pressed Cancel) does not leave an orphan exporter running.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from ...gpt2_config import GPT2Config
from ...progress import ProgressFn

MODEL_FILE = "model.onnx"  # the graph; its weights go beside it in model.onnx.data


def build_fp32(safetensors: Path, config: GPT2Config, out_dir: Path, report: ProgressFn) -> dict:
    """The plain export; the session applies ORT's own graph optimisations (level ALL) at load.

    Not onnxruntime.transformers' optimize_model(model_type="gpt2"): on this export its only
    new fusion is BiasGelu, which drops Gelu's approximate="tanh" and computes the exact erf
    GELU (logits off by ~2e-3), and it is slow on GPT-2 small. ORT's session-level fusions
    keep the tanh form, and loading a saved ORT-optimised copy was no faster than optimising.
    """
    report("exporting to ONNX (torch.export)", 0.05)
    from .export import export_gpt2  # torch is imported here, in this child only

    export_gpt2(safetensors, config, out_dir / MODEL_FILE)
    return {"exporter": "torch.onnx.export(dynamo=True)"}


def build_int8(source: Path, out_dir: Path, report: ProgressFn) -> dict:
    """Dynamic int8: int8 weights for every MatMul (the lm_head included), activations quantised
    per call. The embedding Gather keeps fp32 rows (in the mmapped data file, so only the rows
    looked up become resident): quantising it too cut greedy agreement with fp32 from ~41 to 6
    tokens of 100 on random:gpt2 for no speed gain."""
    report("quantising int8 (dynamic)", 0.1)
    from onnxruntime.quantization import QuantType, quantize_dynamic

    # No DefaultTensorType needed: that fix is for the ORT optimiser's output, not used here.
    quantize_dynamic(
        source,
        out_dir / MODEL_FILE,
        weight_type=QuantType.QInt8,
        op_types_to_quantize=["MatMul"],
        use_external_data_format=True,
    )
    return {"quantisation": "quantize_dynamic QInt8 per-tensor, MatMul only"}


def build_int4(source: Path, out_dir: Path, report: ProgressFn, block_size: int = 32) -> dict:
    """4-bit weight-only (MatMulNBits), int8 compute (accuracy level 4) where the CPU has it."""
    report("quantising int4 (MatMulNBits)", 0.1)
    import onnx
    from onnxruntime.quantization import matmul_nbits_quantizer as nbits

    config = nbits.DefaultWeightOnlyQuantConfig(block_size=block_size, is_symmetric=True, accuracy_level=4)
    quantizer = nbits.MatMulNBitsQuantizer(onnx.load(str(source)), algo_config=config)
    quantizer.process()
    quantizer.model.save_model_to_file(str(out_dir / MODEL_FILE), use_external_data_format=True)
    return {"quantisation": f"MatMulNBits 4-bit symmetric, block {block_size}, accuracy_level 4"}


def stored_weight_bytes(model_file: Path) -> int:
    """Bytes of weights one decode step reads, at their stored size: every initializer as stored
    (int8/int4 weights with their scales and zero points, biases, norms), except tables that only
    Gather reads (the embeddings: one row per token; the tied lm_head's copy is a MatMul's and
    counts). Read from the graph alone: the external data's lengths, not the data."""
    import onnx
    from onnx.helper import tensor_dtype_to_np_dtype

    graph = onnx.load(str(model_file), load_external_data=False).graph
    consumers: dict[str, set[str]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, set()).add(node.op_type)
    total = 0
    for tensor in graph.initializer:
        if consumers.get(tensor.name, set()) <= {"Gather"}:  # gathered rows only (or unused)
            continue
        external = {entry.key: entry.value for entry in tensor.external_data}
        if tensor.data_location == onnx.TensorProto.EXTERNAL and "length" in external:
            total += int(external["length"])
        elif tensor.raw_data:
            total += len(tensor.raw_data)
        else:
            count = 1
            for dim in tensor.dims:
                count *= int(dim)
            bits = {onnx.TensorProto.INT4: 4, onnx.TensorProto.UINT4: 4}.get(tensor.data_type)
            total += (count * bits + 7) // 8 if bits else count * tensor_dtype_to_np_dtype(tensor.data_type).itemsize
    return total


def _exit_when_parent_goes(stdin: TextIO) -> None:
    """The parent holds our stdin open; EOF means it is gone (or wants us gone)."""

    def watch() -> None:
        try:
            stdin.read()
        finally:
            os._exit(3)

    threading.Thread(target=watch, daemon=True, name="parent-watch").start()


def run_child_build(build: Callable[[ProgressFn], dict], model_file: Path) -> int:
    """The builder's side of the protocol (cache.run_builder is the parent's): JSON progress lines
    on the original stdout, library chatter moved to stderr (exporters print to stdout), exit when
    the parent closes our stdin; the last line is {"done": details} with the build time and the
    stored weight bytes of `model_file`. Every child builder (onnx, onnx-concat, GenAI) runs here."""
    channel = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    _exit_when_parent_goes(sys.stdin)

    def report(message: str, fraction: float | None) -> None:
        channel.write(json.dumps({"message": message, "fraction": fraction}) + "\n")

    started = time.perf_counter()
    details = build(report)
    details["build_s"] = round(time.perf_counter() - started, 2)
    details["weight_bytes_per_token"] = stored_weight_bytes(model_file)
    channel.write(json.dumps({"done": details}) + "\n")
    channel.flush()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--variant", choices=("fp32", "int8", "int4"), required=True)
    parser.add_argument("--out", type=Path, required=True, help="empty folder to build into")
    parser.add_argument("--weights", type=Path, help="model.safetensors (fp32)")
    parser.add_argument("--config", type=Path, help="config.json (fp32)")
    parser.add_argument("--source", type=Path, help="the fp32 model.onnx to quantise (int8, int4)")
    args = parser.parse_args(argv)

    def build(report: ProgressFn) -> dict:
        if args.variant == "fp32":
            return build_fp32(args.weights, GPT2Config.from_json(args.config), args.out, report)
        if args.variant == "int8":
            return build_int8(args.source, args.out, report)
        return build_int4(args.source, args.out, report)

    return run_child_build(build, args.out / MODEL_FILE)


if __name__ == "__main__":
    sys.exit(main())
