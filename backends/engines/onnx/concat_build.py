"""Build the classic past/present export in a child process:
`python -m whistle_stop.backends.engines.onnx.concat_build --out DIR --weights F --config F`.

The same protocol as onnx/build.py (JSON progress lines on the original stdout, library chatter
on stderr, exit when stdin closes) and its helpers, so onnx/cache.py runs it the same way and the
worker never imports torch.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ...gpt2_config import GPT2Config
from ...progress import ProgressFn
from .build import MODEL_FILE, run_child_build


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, required=True, help="empty folder to build into")
    parser.add_argument("--weights", type=Path, required=True, help="model.safetensors (fp32)")
    parser.add_argument("--config", type=Path, required=True, help="config.json")
    args = parser.parse_args(argv)

    def build(report: ProgressFn) -> dict:
        report("exporting to ONNX, classic past/present (torch.export)", 0.05)
        from .concat_export import export_gpt2_concat  # torch is imported here, in this child only

        export_gpt2_concat(args.weights, GPT2Config.from_json(args.config), args.out / MODEL_FILE)
        return {"exporter": "torch.onnx.export(dynamo=True)", "kv": "past/present concatenated per step"}

    return run_child_build(build, args.out / MODEL_FILE)


if __name__ == "__main__":
    sys.exit(main())
