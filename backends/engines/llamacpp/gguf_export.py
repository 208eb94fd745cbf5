"""Our own HF safetensors -> GGUF (f32) for llama.cpp's GPT-2 architecture, via gguf.GGUFWriter.

llama.cpp's converter script needs `n_ctx` in config.json (transformers 5 writes only
`n_positions`) and is not a library; this writer uses the gguf package directly: llama.cpp's
GPT-2 tensor names, HF's Conv1D matrices ([in, out]) transposed to [out, in], the tied
lm_head left out (llama.cpp then reuses token_embd, as GPT-2 does), and the real GPT-2
tokenizer from resources/ with the `gpt-2` pre-tokenizer, so llama.cpp's own server
tokenises text the same way. Quantised variants are made from this file by llama.cpp.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ...sources.model_files import ModelFiles
from ...sources.tokenizer import EOS_ID
from ...sources.weights import mmap_numpy
from ...storage.paths import TOKENIZER_DIR

FORMAT = "gguf-1"  # bump when the file layout changes: cached files are then rebuilt
# Normalised HF name inside a block -> (llama.cpp name inside blk.N, transpose from Conv1D)
_BLOCK = {
    "ln_1.weight": ("attn_norm.weight", False),
    "ln_1.bias": ("attn_norm.bias", False),
    "attn.c_attn.weight": ("attn_qkv.weight", True),
    "attn.c_attn.bias": ("attn_qkv.bias", False),
    "attn.c_proj.weight": ("attn_output.weight", True),
    "attn.c_proj.bias": ("attn_output.bias", False),
    "ln_2.weight": ("ffn_norm.weight", False),
    "ln_2.bias": ("ffn_norm.bias", False),
    "mlp.c_fc.weight": ("ffn_up.weight", True),
    "mlp.c_fc.bias": ("ffn_up.bias", False),
    "mlp.c_proj.weight": ("ffn_down.weight", True),
    "mlp.c_proj.bias": ("ffn_down.bias", False),
}
_TOP = {
    "wte.weight": "token_embd.weight",
    "wpe.weight": "position_embd.weight",
    "ln_f.weight": "output_norm.weight",
    "ln_f.bias": "output_norm.bias",
}


def gguf_tensors(tensors: dict[str, np.ndarray], n_layer: int) -> dict[str, np.ndarray]:
    """llama.cpp names -> C-contiguous float32 arrays (numpy shape [out, in] for matrices)."""
    out = {gguf_name: tensors[hf] for hf, gguf_name in _TOP.items()}
    for i in range(n_layer):
        for hf, (name, transpose) in _BLOCK.items():
            array = tensors[f"h.{i}.{hf}"]
            out[f"blk.{i}.{name}"] = array.T if transpose else array
    return {name: np.ascontiguousarray(array, dtype=np.float32) for name, array in out.items()}


def tokenizer_tables(vocab_size: int) -> tuple[list[str], list[int], list[str]]:
    """(tokens by id, token types, merges) of the shipped GPT-2 tokenizer."""
    import gguf

    vocab: dict[str, int] = json.loads((TOKENIZER_DIR / "vocab.json").read_text(encoding="utf-8"))
    if vocab_size < len(vocab):
        raise ValueError(f"the model's vocab_size {vocab_size} is smaller than GPT-2's tokenizer ({len(vocab)})")
    tokens = [f"[PAD{i}]" for i in range(vocab_size)]  # padded vocabularies get unused slots
    types = [int(gguf.TokenType.UNUSED)] * vocab_size
    for text, index in vocab.items():
        tokens[index] = text
        types[index] = int(gguf.TokenType.CONTROL if index == EOS_ID else gguf.TokenType.NORMAL)
    merges = [
        line
        for line in (TOKENIZER_DIR / "merges.txt").read_text(encoding="utf-8").splitlines()
        if line and not line.startswith("#version")
    ]
    return tokens, types, merges


def write_gguf(model: ModelFiles, path: Path) -> None:
    """Write model.gguf (all f32) for `model` to `path`."""
    import gguf

    config = model.gpt2_config.require_supported("llama.cpp's GPT-2 graph")
    writer = gguf.GGUFWriter(str(path), gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.GPT2])
    writer.add_name(model.model_id)
    writer.add_context_length(config.n_positions)
    writer.add_embedding_length(config.n_embd)
    writer.add_feed_forward_length(config.n_inner)
    writer.add_block_count(config.n_layer)
    writer.add_head_count(config.n_head)
    writer.add_layer_norm_eps(config.layer_norm_epsilon)
    writer.add_file_type(int(gguf.LlamaFileType.ALL_F32))
    tokens, types, merges = tokenizer_tables(config.vocab_size)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(EOS_ID)
    writer.add_eos_token_id(EOS_ID)
    writer.add_add_bos_token(False)  # GPT-2 prompts start without a BOS token
    for name, array in gguf_tensors(mmap_numpy(model.safetensors), config.n_layer).items():
        writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
