"""llama.cpp: our own GGUF (names, metadata, tokenizer), parity with transformers, the GGUF cache,
and the weight buffers it may use on this CPU. llama.cpp runs in spawned children only
(tests/engine_process.py): one of its crashes fails one test, not the suite."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import engine_tokens, load_engine_in_worker
from tests.engine_process import in_child
from whistle_stop.backends.registry import available
from whistle_stop.backends.sampling import SamplingParams

_AVAILABLE, _WHY = available("llamacpp")  # found, not imported: libllama is loaded in children only
pytestmark = [pytest.mark.peers, pytest.mark.skipif(not _AVAILABLE, reason=_WHY)]
N = 24


def test_f32_greedy_equals_hf(tiny_model, prompt_ids, hf_reference):
    tokens = engine_tokens("llamacpp", tiny_model, prompt_ids, N)
    assert tokens == hf_reference.greedy(prompt_ids, N)
    assert len(set(tokens)) > 1


def test_f32_logits_close_to_hf(tiny_model, prompt_ids, hf_reference):
    engine = load_engine_in_worker("llamacpp", tiny_model)
    try:
        ids = list(prompt_ids)
        full = hf_reference.logits(ids + [11, 262])
        # ggml's GELU goes through an f16 lookup table, hence a looser bound than fp32 engines.
        np.testing.assert_allclose(engine.prefill(ids), full[len(ids) - 1], atol=2e-2)
        np.testing.assert_allclose(engine.decode(11), full[len(ids)], atol=2e-2)
        np.testing.assert_allclose(engine.decode(262), full[len(ids) + 1], atol=2e-2)
        # a new sequence forgets the old one's KV cache
        np.testing.assert_allclose(engine.prefill(ids[:5]), hf_reference.logits(ids[:5])[-1], atol=2e-2)
    finally:
        engine.close()


def test_f16_agreement_with_hf(tiny_model, prompt_ids, hf_reference):
    """f16 weights need not give HF's exact tokens; the agreement is reported, the count is exact."""
    tokens = engine_tokens("llamacpp-f16", tiny_model, prompt_ids, N)
    reference = hf_reference.greedy(prompt_ids, N)
    agree = sum(a == b for a, b in zip(tokens, reference))
    print(f"llamacpp-f16 agrees with HF fp32 on {agree}/{N} greedy tokens")
    assert len(tokens) == N and tokens[0] == reference[0]


@pytest.mark.parametrize("name", ["llamacpp-bf16", "llamacpp-q8_0", "llamacpp-q4_0"])
def test_quantised_variants_give_n_tokens(tiny_model, prompt_ids, name):
    with load_engine_in_worker(name, tiny_model) as engine:
        tokens = engine.tokens(prompt_ids, 9, SamplingParams("sample", 0.9, 50, 0.95, 1))
        assert len(tokens) == 9 and all(0 <= t < 50257 for t in tokens)
        quant = name.split("-")[1]
        assert quant in engine.folder.name
        assert "weight buffers: CPU_Mapped" in engine.info.notes


def _gguf_path(model, quant: str) -> Path:
    from whistle_stop.backends.engines.llamacpp.engine import GGUF_FILE, ensure_gguf

    return ensure_gguf(model, quant, 1, lambda *a: None) / GGUF_FILE


def _vocab_only_tokens(path: Path, text: str) -> list[int]:
    import llama_cpp

    vocab_only = llama_cpp.Llama(model_path=str(path), vocab_only=True, verbose=False)
    try:
        return vocab_only.tokenize(text.encode(), add_bos=False, special=False)
    finally:
        vocab_only.close()


def test_gguf_metadata_and_tokenizer(tiny_model):
    import gguf

    from whistle_stop.backends.sources.tokenizer import encode

    path = in_child(_gguf_path, tiny_model, "f32")
    reader = gguf.GGUFReader(str(path))
    field = {
        key: reader.fields[key].contents()
        for key in (
            "general.architecture",
            "tokenizer.ggml.pre",
            "gpt2.context_length",
            "gpt2.block_count",
            "tokenizer.ggml.bos_token_id",
            "tokenizer.ggml.eos_token_id",
        )
    }
    assert field["general.architecture"] == "gpt2" and field["tokenizer.ggml.pre"] == "gpt-2"
    assert field["gpt2.context_length"] == 1024 and field["gpt2.block_count"] == 2
    assert field["tokenizer.ggml.bos_token_id"] == field["tokenizer.ggml.eos_token_id"] == 50256
    assert len(reader.fields["tokenizer.ggml.tokens"].data) == 50257
    assert "output.weight" not in {t.name for t in reader.tensors}  # tied: llama.cpp reuses token_embd
    del reader
    text = "Hello world! It's 2024, naïve café — ok?\n  indented   spaces"
    assert in_child(_vocab_only_tokens, path, text) == encode(text)


def test_gguf_cached_then_rebuilt_when_corrupt(tiny_model, prompt_ids, hf_reference):
    from whistle_stop.backends.storage import artifact_cache

    with load_engine_in_worker("llamacpp-q8_0", tiny_model) as first:
        q8_folder = first.folder
    f32_file = q8_folder.parent / "f32" / "model.gguf"
    stamps = {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in (f32_file, q8_folder / "model.gguf")}
    load_engine_in_worker("llamacpp-q8_0", tiny_model).close()
    load_engine_in_worker("llamacpp", tiny_model).close()
    assert {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in stamps} == stamps  # nothing rebuilt
    with f32_file.open("r+b") as handle:
        handle.truncate(f32_file.stat().st_size // 3)
    assert artifact_cache.check(f32_file.parent) != ""
    tokens = engine_tokens("llamacpp", tiny_model, prompt_ids, 8)
    assert artifact_cache.check(f32_file.parent) == ""
    assert tokens == hf_reference.greedy(prompt_ids, 8)


def test_profile_uses_llamacpps_own_timings(tmp_path):
    """llama.cpp times its graph evaluation as a whole: that is "engine (not split)", the
    binding around it framework + Python, and the categories add up to the measured step."""
    from whistle_stop.backends.machine.bandwidth import Bandwidth
    from whistle_stop.backends.profilers.categories import Category
    from whistle_stop.backends.runs.config import BenchConfig
    from whistle_stop.backends.runs.profile import ProfileSession

    bandwidth = Bandwidth(10.0, 10.0, 1, 1, 1, "test", "now")
    config = BenchConfig(
        model="random:tiny",
        backends=("llamacpp",),
        prompt="Hello world, this is a test",
        new_tokens=10,
        repeats=1,
        warmup=1,
        threads=1,
    )
    session = ProfileSession(config, tmp_path, bandwidth=lambda threads, n_bytes, device="cpu": bandwidth)
    (profile,) = session.run().profiles
    assert profile.status == "ok", profile.error
    assert profile.profiler.startswith("llama.cpp timings")
    decode = profile.decode.categories
    assert decode[Category.ENGINE_UNSPLIT.value] > 0 and decode[Category.FRAMEWORK.value] >= 0
    assert abs(decode[Category.UNATTRIBUTED.value]) <= 0.1 * profile.decode.step_ms
    assert (tmp_path / "llamacpp.trace.json").exists()


# --- weight buffers: llama.cpp's extra (repacked, AMX) buffers, probed once per CPU and build ----------


def _crashing_probe(gguf, threads):
    """Stands in for the probe on a CPU where the extra buffers segfault (llama.cpp issue 20824)."""
    return [sys.executable, "-c", "import ctypes; ctypes.string_at(0)"]


def test_a_probe_that_crashes_turns_the_extra_buffers_off_and_is_cached(tiny_model, monkeypatch, tmp_path):
    from whistle_stop.backends.engines.llamacpp import weight_buffers as buffers

    monkeypatch.setenv("WHISTLE_STOP_CACHE", str(tmp_path))
    gguf = in_child(_gguf_path, tiny_model, "q4_0")
    monkeypatch.setattr(buffers, "probe_argv", _crashing_probe)
    choice = buffers.choose(gguf, "q4_0", 1, buffers.WeightBuffers.AUTO)
    assert not choice.extra and choice.probe_s > 0
    assert "killed by SIGSEGV" in choice.reason and "20824" in choice.reason and "no AMX" in choice.reason
    assert "-fno-tree-dse -fno-dse" in choice.reason  # how a user gets the AMX buffers working (docs/engines.md)
    monkeypatch.setattr(buffers, "probe_argv", lambda *a: pytest.fail("probed again: the answer is cached"))
    again = buffers.choose(gguf, "q4_0", 1, buffers.WeightBuffers.AUTO)
    assert again == buffers.BufferChoice(False, choice.reason, 0.0)
    # each quantisation is probed on its own; asking for a path skips the probe
    assert buffers.choose(gguf, "q4_0", 1, buffers.WeightBuffers.EXTRA).extra
    assert not buffers.choose(gguf, "q8_0", 1, buffers.WeightBuffers.PLAIN).extra


def test_the_probes_answer_is_kept_per_cpu_and_llama_cpp_build(monkeypatch):
    """Another CPU (its flags), another llama-cpp-python version or a rebuild of its libraries asks
    the probe again: an answer is never carried over to a machine or build it was not found on."""
    from whistle_stop.backends.engines.llamacpp import weight_buffers as buffers

    monkeypatch.setattr(buffers, "cpuinfo_field", lambda field: "fpu avx512f amx_int8")
    monkeypatch.setattr(buffers, "_llama_version", lambda: "0.3.36")
    monkeypatch.setattr(buffers, "_library_stamps", lambda: ["libggml-cpu.so:100:1"])
    here = buffers.probe_key()
    assert buffers.probe_key() == here  # the same machine and build: the cached answer holds
    monkeypatch.setattr(buffers, "cpuinfo_field", lambda field: "fpu avx512f")
    other_cpu = buffers.probe_key()
    monkeypatch.setattr(buffers, "_llama_version", lambda: "0.3.37")
    other_version = buffers.probe_key()
    monkeypatch.setattr(buffers, "_library_stamps", lambda: ["libggml-cpu.so:100:2"])
    rebuilt = buffers.probe_key()
    assert len({here, other_cpu, other_version, rebuilt}) == 4


def _probed_here(tiny_model):
    """What the engine's own `auto` choice says on this CPU: the probe's cached answer, run (in a child
    of its own) first if this CPU and llama.cpp build have none yet."""
    from whistle_stop.backends.engines.llamacpp import weight_buffers as buffers

    gguf = in_child(_gguf_path, tiny_model, "q4_0")
    return buffers.choose(gguf, "q4_0", 1, buffers.WeightBuffers.AUTO)


def test_the_engine_follows_the_probes_answer_on_this_cpu(tiny_model, prompt_ids):
    """Where the probe ran the extra buffers, the engine loads with them and says so; where they
    crashed (an AMX CPU whose llama.cpp build cannot run its tiles), it loads plain buffers and says
    why. Either way it makes tokens: the expectation is the probe's, never this CPU's name."""
    choice = _probed_here(tiny_model)
    print(f"llama.cpp extra weight buffers on this CPU: {choice.reason}")
    with load_engine_in_worker("llamacpp-q4_0", tiny_model) as engine:
        notes = engine.info.notes
        assert choice.reason in notes, notes
        if choice.extra:
            assert "a probe ran them on this CPU" in notes, notes
        else:
            assert "extra weight buffers off" in notes, notes
            assert set(engine.weight_buffers) == {"CPU_Mapped"}, engine.weight_buffers
        assert len(engine.tokens(prompt_ids, 5)) == 5


def test_after_a_crashing_probe_the_engine_loads_plain_buffers_and_says_why(tiny_model, prompt_ids, monkeypatch):
    """What a user gets on an AMX CPU where llama.cpp's AMX path crashes: plain buffers, tokens,
    and notes that cite the upstream bug (the probe's cached answer is what the engine reads)."""
    from whistle_stop.backends.engines.llamacpp import weight_buffers as buffers

    gguf = in_child(_gguf_path, tiny_model, "q4_0")
    answer = buffers.artifact_cache.cache_dir(buffers.PROBE_KIND, buffers.probe_key()) / "q4_0"
    buffers.artifact_cache.discard(answer)
    monkeypatch.setattr(buffers, "probe_argv", _crashing_probe)
    try:
        assert not buffers.choose(gguf, "q4_0", 1, buffers.WeightBuffers.AUTO).extra
        with load_engine_in_worker("llamacpp-q4_0", tiny_model) as engine:
            notes = engine.info.notes
            assert "extra weight buffers off" in notes and "SIGSEGV" in notes and "20824" in notes
            assert set(engine.weight_buffers) == {"CPU_Mapped"}, engine.weight_buffers
            assert len(engine.tokens(prompt_ids, 12)) == 12
    finally:
        buffers.artifact_cache.discard(answer)  # later tests probe this CPU for real


def _q4_engine(tiny_model, weight_buffers: str):
    from tests.engine_process import EngineProcess
    from whistle_stop.backends.engine import EngineOptions
    from whistle_stop.backends.engines.llamacpp_options import LlamaCppOptions
    from whistle_stop.backends.registry import get

    options = EngineOptions(threads=1, settings=LlamaCppOptions(weight_buffers=weight_buffers))
    return EngineProcess(get("llamacpp-q4_0"), tiny_model, options=options)


def test_each_weight_buffers_choice_is_honoured_where_the_probe_says_it_runs(tiny_model, prompt_ids):
    """`plain` gives tokens on every CPU. `extra` is not probed: where the probe ran the extra buffers,
    repacking changes the layout, not the arithmetic's inputs, so greedy tokens agree closely; where
    the probe saw them crash, the forced load crashes the same way in its own worker, and only there."""
    from tests.engine_process import ChildCrashed

    choice = _probed_here(tiny_model)
    with _q4_engine(tiny_model, "plain") as engine:
        plain, plain_buffers = engine.tokens(prompt_ids, 16), engine.weight_buffers
    assert set(plain_buffers) == {"CPU_Mapped"} and len(plain) == 16, plain_buffers
    if not choice.extra:
        with pytest.raises(ChildCrashed) as crashed, _q4_engine(tiny_model, "extra") as engine:
            engine.tokens(prompt_ids, 16)
        print(f"llamacpp-q4_0: forced extra buffers crashed their worker as the probe said ({crashed.value})")
        return
    with _q4_engine(tiny_model, "extra") as engine:
        extra, extra_buffers = engine.tokens(prompt_ids, 16), engine.weight_buffers
    assert "CPU_Mapped" in extra_buffers, extra_buffers
    agree = next((i for i, (a, b) in enumerate(zip(extra, plain)) if a != b), 16)
    print(f"llamacpp-q4_0: extra and plain buffers agree on {agree}/16 greedy tokens; buffers {extra_buffers}")
    assert agree >= 1, (extra, plain)


def test_the_weight_buffers_option_is_checked_in_one_line():
    from whistle_stop.backends.engines.llamacpp_options import LlamaCppOptions

    assert LlamaCppOptions(weight_buffers="plain").problem() == ""
    assert "one of auto, extra, plain" in LlamaCppOptions(weight_buffers="amx").problem()


def _lookup_run(engine, ids: list[int], new_tokens: int) -> tuple[list[int], object]:
    from whistle_stop.backends.sampling import Sampler

    tokens = [int(t) for t in engine.stream(ids, new_tokens, Sampler(SamplingParams()))]
    return tokens, engine.speculation


def test_prompt_lookup_keeps_llamacpps_greedy_tokens_and_finds_the_repeats(tiny_model):
    """llamacpp-lookup (llama-cpp-python's LlamaPromptLookupDecoding as the draft model): its greedy
    tokens are llamacpp's, on the prompt set and on the bundled repeating one, where the lookup's
    proposals are kept several at a time; a second run starts afresh (no prefix reused)."""
    from tests.prompt_set import PROMPTS
    from whistle_stop.backends.sources.prompts import example_prompt
    from whistle_stop.backends.sources.tokenizer import encode

    prompts = [encode(text) for text in PROMPTS.values()] + [encode(example_prompt("repeating-code"))]
    expected = [engine_tokens("llamacpp", tiny_model, ids, 60) for ids in prompts]
    engine = load_engine_in_worker("llamacpp-lookup", tiny_model)
    try:
        assert engine.info.multi_token_steps and "prompt lookup" in engine.info.notes
        for ids, want in zip(prompts, expected):
            tokens, stats = engine.apply(_lookup_run, ids, 60)
            assert tokens == want
        again, again_stats = engine.apply(_lookup_run, prompts[-1], 60)
        counts = ("tokens", "target_passes", "drafted", "accepted")
        assert again == expected[-1]  # the same passes: nothing cached between runs
        assert [getattr(again_stats, c) for c in counts] == [getattr(stats, c) for c in counts]
        assert stats.accepted > 0 and stats.tokens_per_pass > 1.0 and stats.drafted >= stats.accepted
    finally:
        engine.close()
