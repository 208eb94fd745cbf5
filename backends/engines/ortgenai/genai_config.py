"""genai_config.json for the exported decoder, and the per-load overlay of its session options.

Torch-free and onnxruntime-free: the build child writes the file, the engine overlays threads.
The search section holds defaults only; every run sets its own search options (length, sampling).
"""

from __future__ import annotations

import json
from pathlib import Path

from ...gpt2_config import GPT2Config

CONFIG_FILE = "genai_config.json"
MODEL_FILE = "model.onnx"  # its weights beside it in model.onnx.data
END_OF_TEXT = 50256


def genai_config(config: GPT2Config) -> dict:
    """A `decoder` model (GenAI's generic decoder-only type) with the export's names."""
    return {
        "model": {
            "type": "decoder",
            "bos_token_id": END_OF_TEXT,
            "eos_token_id": END_OF_TEXT,
            "pad_token_id": END_OF_TEXT,
            "vocab_size": config.vocab_size,
            "context_length": config.n_positions,
            "decoder": {
                "filename": MODEL_FILE,
                "session_options": {"log_id": "whistle-stop", "provider_options": []},
                "head_size": config.head_dim,
                "hidden_size": config.n_embd,
                "num_attention_heads": config.n_head,
                "num_key_value_heads": config.n_head,
                "num_hidden_layers": config.n_layer,
                "inputs": {
                    "input_ids": "input_ids",
                    "past_key_names": "past_key_values.%d.key",
                    "past_value_names": "past_key_values.%d.value",
                },
                "outputs": {
                    "logits": "logits",
                    "present_key_names": "present.%d.key",
                    "present_value_names": "present.%d.value",
                },
            },
        },
        "search": {
            "max_length": config.n_positions,
            "min_length": 0,
            "do_sample": False,
            "num_beams": 1,
            "num_return_sequences": 1,
            "top_k": 1,
            "top_p": 1.0,
            "temperature": 1.0,
            "repetition_penalty": 1.0,
            "length_penalty": 1.0,
            "early_stopping": True,
            # The export concatenates past and present (no in-place buffer of max_length).
            "past_present_share_buffer": False,
        },
    }


def write_genai_config(config: GPT2Config, folder: Path) -> None:
    (folder / CONFIG_FILE).write_text(json.dumps(genai_config(config), indent=1))


def threads_overlay(threads: int) -> str:
    """The session options one load runs with (0: ORT's default), overlaid on the cached file,
    which stays untouched (its sha256 is in the manifest)."""
    session = {"intra_op_num_threads": max(0, int(threads)), "inter_op_num_threads": 1}
    return json.dumps({"model": {"decoder": {"session_options": session}}})
