"""Build the classic past/present export in a child process:
`python -m whistle_stop.backends.engines.onnx.concat_build --out DIR --weights F --config F`.

The same protocol as onnx/build.py (JSON progress lines on the original stdout, library chatter
on stderr, exit when stdin closes) and its helpers, so onnx/cache.py runs it the same way and the
worker never imports torch.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from ...gpt2_config import GPT2Config
from .build import MODEL_FILE, _exit_when_parent_goes, stored_weight_bytes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, required=True, help="empty folder to build into")
    parser.add_argument("--weights", type=Path, required=True, help="model.safetensors (fp32)")
    parser.add_argument("--config", type=Path, required=True, help="config.json")
    args = parser.parse_args(argv)

    channel = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # the exporter prints to stdout: keep it off the progress channel
    sys.stdout = sys.stderr
    _exit_when_parent_goes(sys.stdin)

    started = time.perf_counter()
    channel.write(json.dumps({"message": "exporting to ONNX, classic past/present (torch.export)",
                              "fraction": 0.05}) + "\n")
    from .concat_export import export_gpt2_concat  # torch is imported here, in this child only

    export_gpt2_concat(args.weights, GPT2Config.from_json(args.config), args.out / MODEL_FILE)
    details = {"exporter": "torch.onnx.export(dynamo=True)", "kv": "past/present concatenated per step",
               "build_s": round(time.perf_counter() - started, 2),
               "weight_bytes_per_token": stored_weight_bytes(args.out / MODEL_FILE)}
    channel.write(json.dumps({"done": details}) + "\n")
    channel.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
