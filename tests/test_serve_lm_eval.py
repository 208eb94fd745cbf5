"""lm-evaluation-harness (`local-completions`) against `whistle-stop serve`: the harness everyone uses
scores text through echo + logprobs, and its perplexity must equal `quality`'s on the same text.

The task is defined here from the bundled evaluation text, cut to fit one context window, and
nothing is downloaded: lm-eval reads the text from a local JSON file and tokenises it with a GPT-2
tokenizer folder written from resources/tokenizer. Both score every token with the same context at
the same position: `quality` scores tokens 1..N-1 of the text (nothing predicts token 0); the
harness's rolling window puts its prefix token in front of its document, so its document is the text
after token 0 and its prefix token is token 0 (`custom_prefix_token_id`; by default it would be
<|endoftext|>, which shifts every position by one: on random weights, 5.8% apart).
"""

from __future__ import annotations

import csv
import json
import math
import shutil
import subprocess
import sys

import pytest

from tests.serve_helpers import ROOT, served
from whistle_stop.backends.sources.tokenizer import decode, encode

pytestmark = pytest.mark.slow
lm_eval = pytest.importorskip("lm_eval")

TOKENS = 1000  # + the one token the harness asks to generate: within 1,024
TOKENIZER_CONFIG = {
    "tokenizer_class": "GPT2Tokenizer",
    "model_max_length": 1024,
    "bos_token": "<|endoftext|>",
    "eos_token": "<|endoftext|>",
    "unk_token": "<|endoftext|>",
    "add_prefix_space": False,
}
PERPLEXITY_TASK = """task: whistle_stop_eval_ppl
dataset_path: json
dataset_kwargs:
  data_files:
    test: {docs}
test_split: test
output_type: loglikelihood_rolling
doc_to_text: ""
doc_to_target: "{{{{text}}}}"
metric_list:
  - metric: word_perplexity
  - metric: byte_perplexity
  - metric: bits_per_byte
"""
GENERATE_TASK = """task: whistle_stop_eval_gen
dataset_path: json
dataset_kwargs:
  data_files:
    test: {docs}
test_split: test
output_type: generate_until
doc_to_text: "{{{{prompt}}}}"
doc_to_target: "{{{{target}}}}"
generation_kwargs:
  until: [".", "\\n", " the"]
  max_gen_toks: 24
  do_sample: false
  temperature: 0
metric_list:
  - metric: exact_match
"""


def _tokenizer_folder(folder):
    folder.mkdir()
    for name in ("vocab.json", "merges.txt"):
        shutil.copy(ROOT / "resources" / "tokenizer" / name, folder / name)
    (folder / "tokenizer_config.json").write_text(json.dumps(TOKENIZER_CONFIG))
    return folder


def _quality_perplexity(text_path, out) -> float:
    """whistle-stop's own `quality` perplexity of numpy on random:tiny, on the same text."""
    command = [sys.executable, str(ROOT / "main.py"), "quality", "--model", "random:tiny", "--backends", "numpy"]
    command += ["--text", str(text_path), "--out", str(out), "--repeats", "1", "--new-tokens", "2"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    with open(out / "quality.csv", newline="") as handle:
        rows = {row["backend"]: row for row in csv.DictReader(handle)}
    return float(rows["numpy"]["perplexity"])


def test_lm_eval_perplexity_equals_quality_and_generate_until_runs(tiny_model, tmp_path, monkeypatch):
    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.setenv(name, "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "datasets"))
    text = decode(encode((ROOT / "resources" / "eval" / "eval.txt").read_text(encoding="utf-8"))[:TOKENS])
    ids = encode(text)
    rest = decode(ids[1:])  # the harness's document: its prefix token is ids[0]
    assert len(ids) <= TOKENS and encode(rest) == ids[1:]
    (tmp_path / "text.txt").write_text(text, encoding="utf-8")
    docs = tmp_path / "docs.jsonl"
    words = text.split()
    doc = {"text": rest, "prompt": " ".join(words[:12]), "target": " ".join(words[12:16])}
    docs.write_text(json.dumps(doc) + "\n", encoding="utf-8")
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "ppl.yaml").write_text(PERPLEXITY_TASK.format(docs=docs))
    (tasks / "gen.yaml").write_text(GENERATE_TASK.format(docs=docs))
    tokenizer = _tokenizer_folder(tmp_path / "tokenizer")

    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    with served("numpy", tiny_model) as server:
        model_args = (
            f"model=random:tiny,base_url={server.url}/v1/completions,tokenizer={tokenizer},"
            "tokenizer_backend=huggingface,tokenized_requests=True,max_length=1024,num_concurrent=1,max_retries=1,"
            f"custom_prefix_token_id={ids[0]}"
        )
        results = simple_evaluate(
            model="local-completions",
            model_args=model_args,
            tasks=["whistle_stop_eval_ppl", "whistle_stop_eval_gen"],
            task_manager=TaskManager(include_path=str(tasks)),
            batch_size=1,
            log_samples=True,
        )
        logged = list(server.lines)
    assert not [line for line in logged if " 200 " not in line and "cmpl-" in line], logged
    byte_perplexity = results["results"]["whistle_stop_eval_ppl"]["byte_perplexity,none"]
    loglikelihood = -math.log(byte_perplexity) * len(rest.encode("utf-8"))
    harness = math.exp(-loglikelihood / (len(ids) - 1))  # tokens 1..N-1, as quality scores them
    quality = _quality_perplexity(tmp_path / "text.txt", tmp_path / "quality")
    print(f"lm-eval {harness:.4f} vs quality {quality:.4f} ({len(ids)} tokens)")
    assert harness == pytest.approx(quality, rel=1e-3)
    generated = results["samples"]["whistle_stop_eval_gen"][0]["resps"][0][0]
    assert isinstance(generated, str) and "." not in generated and "\n" not in generated
    assert "exact_match,none" in results["results"]["whistle_stop_eval_gen"]
