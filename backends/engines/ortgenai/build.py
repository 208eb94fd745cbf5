"""Build one GenAI artefact in a child process: `python -m whistle_stop.backends.engines.ortgenai.build ...`.

fp32: the decoder export (export.py, imports torch, hence the child) plus genai_config.json;
int8/int4: ONNX Runtime's MatMulNBitsQuantizer on the cached fp32 graph (block 32, symmetric,
accuracy level 4: int8 compute where the CPU has it). The protocol is onnx/build.py's (JSON
progress lines on the original stdout, library chatter on stderr, exit when stdin closes), so
onnx/cache.py's runner drives it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ...gpt2_config import GPT2Config
from ...progress import ProgressFn
from ..onnx.build import run_child_build
from .genai_config import MODEL_FILE, write_genai_config

BITS = {"int8": 8, "int4": 4}
BLOCK_SIZE = 32


def quantisation_note(variant: str) -> str:
    return f"MatMulNBits {BITS[variant]}-bit symmetric, block {BLOCK_SIZE}, accuracy_level 4"


def build_fp32(weights: Path, config: GPT2Config, out: Path) -> dict:
    from .export import export_decoder  # torch is imported here, in this child only

    export_decoder(weights, config, out / MODEL_FILE)
    return {"exporter": "torch.onnx.export(dynamo=True)", "kv": "past/present concatenated per step"}


def build_quantised(variant: str, source: Path, config: GPT2Config, out: Path) -> dict:
    """Every MatMul with a constant weight (the four per layer and the lm_head) to MatMulNBits."""
    import onnx
    from onnxruntime.quantization import matmul_nbits_quantizer as nbits

    algo = nbits.DefaultWeightOnlyQuantConfig(
        block_size=BLOCK_SIZE, is_symmetric=True, accuracy_level=4, bits=BITS[variant]
    )
    quantizer = nbits.MatMulNBitsQuantizer(
        onnx.load(str(source)),
        bits=BITS[variant],
        block_size=BLOCK_SIZE,
        is_symmetric=True,
        accuracy_level=4,
        algo_config=algo,
    )
    quantizer.process()
    quantizer.model.save_model_to_file(str(out / MODEL_FILE), use_external_data_format=True)
    return {"quantisation": quantisation_note(variant)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--variant", choices=("fp32", *BITS), required=True)
    parser.add_argument("--out", type=Path, required=True, help="empty folder to build into")
    parser.add_argument("--config", type=Path, required=True, help="config.json")
    parser.add_argument("--weights", type=Path, help="model.safetensors (fp32)")
    parser.add_argument("--source", type=Path, help="the fp32 model.onnx to quantise (int8, int4)")
    args = parser.parse_args(argv)

    def build(report: ProgressFn) -> dict:
        config = GPT2Config.from_json(args.config)
        if args.variant == "fp32":
            report("exporting GPT-2 as a GenAI decoder (torch.export)", 0.05)
            details = build_fp32(args.weights, config, args.out)
        else:
            report(f"quantising for GenAI ({quantisation_note(args.variant)})", 0.1)
            details = build_quantised(args.variant, args.source, config, args.out)
        write_genai_config(config, args.out)
        return details

    return run_child_build(build, args.out / MODEL_FILE)


if __name__ == "__main__":
    sys.exit(main())
