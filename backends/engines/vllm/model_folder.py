"""The model as a folder vLLM loads: config.json, the safetensors (hard-linked), a tokenizer.

The tokenizer files are written by vLLM's own transformers, from the shipped vocabulary, so that
they suit the version vLLM reads them with (with transformers 5, GPT2TokenizerFast(vocab_file=,
merges_file=) silently builds an empty tokenizer: the files go in as vocab= / merges=). Random
weights (`random:*`) get a folder like any other. Cached per weights hash and config.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

from ...progress import ProgressFn
from ...sources.model_files import WEIGHT_FILE, ModelFiles
from ...storage import artifact_cache
from ...storage.paths import TOKENIZER_DIR
from .environment import VllmEnvironment

KIND = "vllm_model"
FORMAT = 1
_TOKENIZER_SCRIPT = """
import json, sys
from transformers import GPT2TokenizerFast
vocab = json.load(open(sys.argv[1], encoding="utf-8"))
merges = [tuple(l.split()) for l in open(sys.argv[2], encoding="utf-8").read().splitlines()[1:] if l.strip()]
tokenizer = GPT2TokenizerFast(vocab=vocab, merges=merges)
assert len(tokenizer) == 50257 and tokenizer.convert_tokens_to_ids("<|endoftext|>") == 50256, len(tokenizer)
tokenizer.save_pretrained(sys.argv[3])
"""


def ensure_model_folder(
    model: ModelFiles, environment: VllmEnvironment, progress: ProgressFn
) -> artifact_cache.Artifact:
    config_key = hashlib.sha256(json.dumps(model.config, sort_keys=True).encode()).hexdigest()[:8]
    return artifact_cache.ensure(
        KIND,
        model.weights_hash,
        f"hf-{config_key}",
        lambda out: _write(model, environment, out, progress),
        progress,
        meta={"format": FORMAT, "vllm": environment.version},
    )


def _write(model: ModelFiles, environment: VllmEnvironment, out: Path, progress: ProgressFn) -> dict:
    progress("writing the model folder vLLM loads", None)
    config = dict(model.config)
    config.setdefault("architectures", ["GPT2LMHeadModel"])
    config.setdefault("torch_dtype", "float32")
    (out / "config.json").write_text(json.dumps(config, indent=1), encoding="utf-8")
    artifact_cache.link_or_copy(model.safetensors, out / WEIGHT_FILE)
    result = subprocess.run(
        [
            str(environment.python),
            "-c",
            _TOKENIZER_SCRIPT,
            str(TOKENIZER_DIR / "vocab.json"),
            str(TOKENIZER_DIR / "merges.txt"),
            str(out),
        ],
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        tail = (result.stderr or result.stdout).strip().splitlines()
        raise RuntimeError(f"could not write the tokenizer for vLLM: {tail[-1] if tail else 'no output'}")
    return {"source": str(model.folder)}
