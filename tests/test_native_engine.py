"""The native engines: GPT-2's whole step in one C call (backends/kernels/gpt2_step.c), at fp32,
bf16, int8 and 4-bit weights. fp32 must equal transformers' greedy tokens; the others are held
to their quantisation's error against float32 and report their agreement like any engine.
The C code runs in spawned children (tests/engine_process.py): a crash fails one test, not the suite."""

from __future__ import annotations

import mmap
import re
from pathlib import Path

import numpy as np
import pytest

from whistle_stop.backends.engines.native import weights
from whistle_stop.backends.engines.numpy_runtime.model import file_mapping
from whistle_stop.backends.kernels import native
from whistle_stop.backends.profilers.capture import ProfileCapture
from whistle_stop.backends.profilers.categories import Category
from whistle_stop.backends.storage import huge_pages

from .conftest import greedy_logits, load_engine_in_worker
from .engine_process import in_child

pytestmark = pytest.mark.skipif(native.compiler() is None, reason="needs a C compiler")

# Largest |logit - float32 reference| each stored type may show on random:tiny (its logits are O(1)).
TOLERANCE = {"native": 1e-4, "native-bf16": 0.15, "native-int8": 0.6, "native-int4": 6.0}


@pytest.mark.parametrize("threads", [1, 2])
def test_fp32_greedy_equals_transformers_generate(engines, prompt_ids, hf_reference, threads):
    tokens = engines("native", threads).tokens(prompt_ids, 40)
    assert tokens == hf_reference.greedy(prompt_ids, 40)


@pytest.mark.parametrize("name", list(TOLERANCE))
def test_logits_of_prefill_and_every_decode_step_match_transformers(name, engines, prompt_ids, hf_reference):
    engine = engines(name, threads=2)
    tokens, logits = greedy_logits(engine, prompt_ids, 12)
    reference = hf_reference.logits(prompt_ids + tokens)[len(prompt_ids) - 1 :]
    assert np.abs(logits - reference).max() < TOLERANCE[name]
    # scoring a whole sequence (perplexity) takes the prefill path for every position
    scored = engine.forward_logits(prompt_ids + tokens)
    assert np.abs(scored - hf_reference.logits(prompt_ids + tokens)).max() < TOLERANCE[name]


@pytest.mark.parametrize("name", list(TOLERANCE))
def test_a_prefill_that_returns_one_position_skips_nothing_it_needs(name, engines, hf_reference):
    """Prefill runs its last layer past the keys and values only for the last position (the other
    rows feed nothing): its logits are the full pass's last row, on prompts that take the attention's
    tiles (9, 37: odd, past a tile of 12 queries) and on one token."""
    from whistle_stop.backends.sources.prompts import prompt_of_length

    engine = engines(name, threads=2)
    for length in (1, 9, 37):
        ids = prompt_of_length(length)
        last = engine.prefill(ids)
        every = engine.forward_logits(ids)
        assert every.shape[0] == length
        assert np.abs(last - every[-1]).max() < TOLERANCE[name] / 4, length
        assert np.abs(last - hf_reference.logits(ids)[-1]).max() < TOLERANCE[name], length


def _stored_weights(engine) -> tuple[int, list[bool], list[bool]]:
    """In the engine's child: its matrices' bytes, whether each weight array maps the weight file, and
    whether each matrix lies in a mapping advised for huge pages (Linux's VmFlags "hg")."""
    matrices = [engine.model.lm_head.data] + [a.data for a in engine.model._keep if not isinstance(a, np.ndarray)]
    arrays = matrices + [a for a in engine.model._keep if isinstance(a, np.ndarray)]
    mapped = [isinstance(file_mapping(a), (mmap.mmap, np.memmap)) for a in arrays]
    flags = [huge_pages.mapping_fields(m.ctypes.data).get("VmFlags", "").split() for m in matrices]
    return engine.model.matrix_bytes, mapped, ["hg" in f for f in flags]


@pytest.mark.parametrize(
    "name, dtype", [("native", "fp32"), ("native-bf16", "bf16"), ("native-int8", "int8"), ("native-int4", "int4")]
)
def test_info_counts_the_stored_bytes(name, dtype, tiny_model, engines):
    engine = engines(name)
    info = engine.info
    matrix_bytes, mapped, advised = engine.apply(_stored_weights)
    config = tiny_model.gpt2_config
    vectors = config.weight_bytes(0, 4)
    assert info.dtype == dtype and info.device == "cpu"
    assert info.weight_bytes_per_token == matrix_bytes + vectors
    fp32 = config.weight_bytes(4, 4)
    share = {"fp32": 1.0, "bf16": 0.5, "int8": 0.25, "int4": 0.125}[dtype]
    assert info.weight_bytes_per_token >= share * (fp32 - vectors) + vectors
    assert info.weight_bytes_per_token < (share * 1.3) * (fp32 - vectors) + vectors  # scales are a few %
    assert info.kv_bytes_per_position == config.kv_bytes_per_position(4)
    # every weight is its own copy at the stored type: nothing keeps the weight file mapped
    assert not any(mapped)
    # the matrices, read every token, in one region advised for 2 MB pages (storage/huge_pages)
    assert re.search(r"weights (in|advised for) (2 MB|4 KB) pages", info.notes)
    if huge_pages.thp_setting() in ("always", "madvise"):
        assert all(advised) and "weights in 4 KB pages" not in info.notes


def test_sequence_restarts_and_the_context_has_an_end(tiny_model, prompt_ids, engines):
    engine = engines("native")
    first = engine.prefill(prompt_ids)
    engine.decode(3)
    np.testing.assert_array_equal(engine.prefill(prompt_ids), first)  # a new prefill forgets the old sequence
    with pytest.raises(ValueError, match="token id out of range"):
        engine.decode(tiny_model.gpt2_config.vocab_size)
    with pytest.raises(ValueError, match="tokens"):
        engine.prefill([])
    n = tiny_model.gpt2_config.n_positions
    engine.prefill([1] * n)
    with pytest.raises(ValueError, match="context is full"):
        engine.decode(1)


def test_without_a_compiler_the_engine_says_so(tiny_model, monkeypatch):
    monkeypatch.setenv("CC", "/nonexistent/cc")  # set before the spawn: the child inherits it
    with pytest.raises(RuntimeError, match="needs a C compiler.*nonexistent"):
        load_engine_in_worker("native-int8", tiny_model).close()


def test_quantisers_round_trip_within_half_a_step():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((40, 128)).astype(np.float32)
    q, scale = weights.quantise_rows_i8(w)
    assert np.abs(q * scale[:, None] - w).max() <= scale.max() / 2 + 1e-6
    for k in (128, 96, 32):
        wk = rng.standard_normal((40, k)).astype(np.float32)
        panels = weights.quantise_blocks_q4(wk)
        assert panels.shape == (2, k // 32 * 640)  # per block of 32 rows: 16 bytes of nibbles and a scale each
        block_scale = np.abs(wk.reshape(40, -1, 32)).max(axis=2) / 7
        restored = weights.unpack_q4(panels, 40, k)
        assert np.abs(restored - wk).max() <= block_scale.max() / 2 + 1e-6
        steps = np.rint(wk.reshape(40, -1, 32) / block_scale[:, :, None]).reshape(40, k)
        np.testing.assert_allclose(restored, (np.clip(steps, -8, 7) * np.repeat(block_scale, 32, axis=1)), rtol=1e-5)
        if k > 32:  # row 33's 4 bytes of block 1's step 2: elements 48 + e in the low nibbles, 52 + e in the high
            nibbles = panels[1].reshape(-1, 640)[1][2 * 128 + 1 * 4 : 2 * 128 + 1 * 4 + 4]
            expect = np.clip(steps[33, 48:56], -8, 7) + 8
            np.testing.assert_array_equal(np.concatenate([nibbles & 15, nibbles >> 4]), expect)
    bits = weights.to_bf16_bits(w)
    widened = (bits.astype(np.uint32) << 16).view(np.float32)
    np.testing.assert_allclose(widened, w, rtol=2**-8)
    for rows in (w[:37, :70], weights.to_bf16_bits(w[:33])):  # float32 and bf16 panels: the last one padded
        panels = weights.to_panels(rows)
        assert panels.shape == (2, rows.shape[1] * 32) and panels.dtype == rows.dtype
        np.testing.assert_array_equal(weights.from_panels(panels, *rows.shape), rows)
        e = 4 // rows.dtype.itemsize  # a step's 4 bytes of each of 32 rows side by side
        np.testing.assert_array_equal(panels[0, : 32 * e].reshape(32, e), rows[:32, :e])
        assert not panels[1].reshape(-1, 32, e)[:, rows.shape[0] - 32 :].any()  # padding rows are zeros
    panels = weights.i8_panels(q[:37])  # int8: value + 128, padding rows of value 0
    assert panels.dtype == np.uint8 and panels.shape == (2, 128 * 32)
    np.testing.assert_array_equal(weights.from_panels(panels, 37, 128).astype(np.int16) - 128, q[:37])
    assert (panels[1].reshape(-1, 32, 4)[:, 5:] == weights.I8_SHIFT).all()
    with pytest.raises(ValueError, match="multiple of 2"):
        weights.to_panels(weights.to_bf16_bits(w[:, :7]))


def _bf16_stored(w: np.ndarray) -> np.ndarray:
    return (weights.to_bf16_bits(w).astype(np.uint32) << 16).view(np.float32)


def _q4_stored(w: np.ndarray) -> np.ndarray:
    return weights.unpack_q4(weights.quantise_blocks_q4(w), *w.shape)


# What is left against the numpy runtime on the stored weights: int4, the activations' int8 rounding
# (~0.1 on random:tiny); bf16, only the order of float32 sums (~1e-6). Reading the interleaved nibbles
# or the de-interleaved bf16 pairs in another order than they were written is off by ~1-10.
def _step_and_reference(wtype, stored_as, tiny_model, prompt_ids) -> list[tuple[np.ndarray, np.ndarray]]:
    """In a child: (native, numpy) logits of prefill and of three decode steps on the same stored weights."""
    from whistle_stop.backends.engines.native import step
    from whistle_stop.backends.engines.numpy_runtime.model import GPT2, nest_params
    from whistle_stop.backends.sources.weights import mmap_numpy

    config = tiny_model.gpt2_config
    params = nest_params(mmap_numpy(tiny_model.safetensors), config.n_layer)

    def stored(w_out_in: np.ndarray) -> np.ndarray:
        return stored_as(np.ascontiguousarray(w_out_in, np.float32))

    def as_stored(leaf: dict) -> dict:  # HF Conv1D [in, out]
        return {"w": np.ascontiguousarray(stored(leaf["w"].T).T), "b": leaf["b"]}

    blocks = [
        {
            **block,
            "attn": {k: as_stored(v) for k, v in block["attn"].items()},
            "mlp": {k: as_stored(v) for k, v in block["mlp"].items()},
        }
        for block in params["blocks"]
    ]
    reference = GPT2(
        {**params, "wte": stored(params["wte"]), "blocks": blocks},
        config.n_head,
        np.float32(config.layer_norm_epsilon),
        config.n_positions,
    )
    model = step.NativeGPT2(params, config, wtype)
    ids = np.array(prompt_ids, np.int32)
    pairs = [(model.prefill(ids), reference.prefill(ids))]
    # decode from a one-token prompt: every product in decode's arithmetic (a prefill's may be bf16)
    model.prefill(ids[:1]), reference.prefill(ids[:1])
    return pairs + [(model.decode(token), reference.decode(token)) for token in (5, 17, 4000)]


@pytest.mark.parametrize(
    "wtype, stored_as, prefill_limit, limit",
    [
        (weights.WeightType.Q4, _q4_stored, 0.5, 0.5),
        # a CPU with BF16 products rounds prefill's activations to bf16 too (decode keeps them float32)
        (weights.WeightType.BF16, _bf16_stored, 0.1, 1e-3),
    ],
)
def test_step_reads_the_weights_as_they_were_laid_out(wtype, stored_as, prefill_limit, limit, tiny_model, prompt_ids):
    """The native step against the numpy runtime on the very weights it stores (by the Python reference)."""
    prefill, *decodes = in_child(_step_and_reference, wtype, stored_as, tiny_model, prompt_ids)
    assert np.abs(prefill[0] - prefill[1]).max() < prefill_limit
    for ours, reference in decodes:  # tokens 5, 17, 4000
        assert np.abs(ours - reference).max() < limit


def _profiled_steps(engine, prompt_ids) -> tuple[ProfileCapture, bool]:
    """In the engine's child: a profiled prefill and three decode steps; the capture, and whether the
    timers are off again."""
    profiler = engine.profiler()
    profiler.start()
    with profiler.step("prefill"):
        logits = engine.prefill(prompt_ids)
    for _ in range(3):
        with profiler.step("decode"):
            logits = engine.decode(int(np.argmax(logits)))
    return profiler.finish(""), engine.model.timers is None


def test_profile_timers_split_the_step(prompt_ids, engines):
    capture, timers_off = engines("native-int4").apply(_profiled_steps, prompt_ids)
    assert capture.steps == {"prefill": 1, "decode": 3}
    decode = {op.category: op.total_ns for op in capture.ops if op.phase == "decode"}
    assert set(decode) == {
        c.value
        for c in (
            Category.MATMUL,
            Category.ATTENTION,
            Category.KV_CACHE,
            Category.NORM_ACTIVATION,
            Category.OTHER_KERNELS,
        )
    }
    assert decode[Category.MATMUL.value] > 0
    assert timers_off  # timers off again once the profile is done


def _fast_and_plain(
    tiny_model, prompt_ids, portable: Path, kv: str = "fp32"
) -> list[list[tuple[np.ndarray, np.ndarray]]]:
    """In a child, per weight type: (plain, fast) logits of prefill and of three decode steps."""
    import ctypes

    from whistle_stop.backends.engines.native import step
    from whistle_stop.backends.engines.numpy_runtime.model import nest_params
    from whistle_stop.backends.sources.weights import mmap_numpy

    config = tiny_model.gpt2_config
    pairs = []
    for wtype in weights.WeightType:
        params = nest_params(mmap_numpy(tiny_model.safetensors), config.n_layer)
        fast = step.NativeGPT2(params, config, wtype, kv=step.KvCache(kv))
        plain = step.NativeGPT2(params, config, wtype, step.bind(ctypes.CDLL(str(portable))), kv=step.KvCache(kv))
        prefill = (plain.prefill(prompt_ids), fast.prefill(prompt_ids))
        plain.prefill(prompt_ids[:1]), fast.prefill(prompt_ids[:1])  # decode's products alone from here
        # decode's attention over more and more positions; with float32 weights (the integer types'
        # activations may round the other way after a few steps) past 16 keys (the 8-bit cache's vector
        # path sums 16 keys' scores at once) and not a multiple of 16
        longer = tuple(range(100, 125)) if wtype == weights.WeightType.F32 else ()
        decoded = (*prompt_ids[1:], 5, 17, 4000, *longer)
        pairs.append([prefill] + [(plain.decode(token), fast.decode(token)) for token in decoded])
    return pairs


# How far the plain build's prefill may be from the engines' build: float32 sums in another order; the
# engines' bf16 products round the activations to bf16 (on a CPU with them); an integer type's
# activations are quantised from float sums that differ in the last bits, so one may round the other way.
PREFILL_DRIFT = {
    weights.WeightType.F32: 1e-4,
    weights.WeightType.BF16: 0.1,
    weights.WeightType.I8: 0.3,
    weights.WeightType.Q4: 0.6,
}


# a build for CPUs with fewer instructions than this one: its flags in -march=native's place, what it needs
PORTABLE_BUILDS = {"plain C": (("-mno-avx2", "-mno-fma"), ()), "avx2": (("-march=x86-64-v3",), ("avx2", "fma"))}


@pytest.mark.parametrize("build", list(PORTABLE_BUILDS))
@pytest.mark.parametrize("kv", ["fp32", "int8"])
def test_portable_builds_compute_what_the_engines_build_does(build, kv, tiny_model, prompt_ids, tmp_path):
    """The plain-C twins (CPUs without AVX2) and the AVX2 build (the Zen 3 EPYC's) against the build
    the engines use: decode's products and attention alike (an 8-bit cache's rows widened in AVX-512
    registers, AVX2 ones or plain C), prefill's within each type's drift (tests/test_native_prefill.py
    checks each product path exactly against a reference)."""
    import subprocess

    from whistle_stop.backends.machine.cpu import cpuinfo_field

    extra, needs = PORTABLE_BUILDS[build]
    if not set(needs) <= set(cpuinfo_field("flags").split()):
        pytest.skip(f"this CPU cannot run the {build} build")
    source = Path(native.__file__).with_name("gpt2_step.c")
    portable = tmp_path / "libgpt2_step_portable.so"
    flags = [f for f in native.FLAGS if f != "-march=native"] + list(extra)
    subprocess.run([native.compiler(), *flags, str(source), "-o", str(portable), *native.LIBS], check=True)
    results = in_child(_fast_and_plain, tiny_model, prompt_ids, portable, kv)
    for wtype, ((second, first), *decodes) in zip(weights.WeightType, results):
        assert np.abs(second - first).max() < PREFILL_DRIFT[wtype], wtype
        for plain, fast in decodes:  # tokens 5, 17, 4000
            np.testing.assert_allclose(plain, fast, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("name", ["native-int8", "native-int4"])
def test_integer_types_score_what_they_decode(name, engines, prompt_ids):
    """Prefill and scoring make decode's integer products (int8 activations per block): the logits
    a sequence is scored with are the ones it was decoded with (perplexity and divergence reports)."""
    engine = engines(name, threads=2)
    tokens, logits = greedy_logits(engine, prompt_ids, 8)
    scored = engine.forward_logits(prompt_ids + tokens)[len(prompt_ids) - 1 :]
    np.testing.assert_allclose(scored, logits, rtol=1e-4, atol=1e-4)


def test_the_kernels_first_build_is_build_time_not_load(tiny_model, monkeypatch, tmp_path):
    """Built on first use (a change of source, compiler or CPU): cold start says so, as for any
    cached artefact, instead of counting the compile as load."""
    monkeypatch.setenv("WHISTLE_STOP_CACHE", str(tmp_path))  # an empty cache: the kernel is built again
    with load_engine_in_worker("native-int8", tiny_model) as engine:
        first = engine.info
    with load_engine_in_worker("native-int8", tiny_model) as engine:  # a second worker: opens the cached build
        second = engine.info
    assert first.artifact_cache == "miss" and first.build_s > 0.05
    assert second.artifact_cache == "hit" and second.build_s == 0.0


@pytest.mark.parametrize("name", ["native", "native-int8"])
def test_an_8_bit_kv_cache_reads_a_quarter_and_stays_close(name, tiny_model, prompt_ids, hf_reference):
    """--native-kv int8: each head's row of keys or values in 8 bits with a float32 scale. The engine
    says so, counts its bytes per position (a byte a value and the scales), and its logits stay
    within its weights' tolerance of transformers' (agreement is reported like any precision's)."""
    from whistle_stop.backends.engine import EngineOptions
    from whistle_stop.backends.engines.native_options import NativeOptions

    from .engine_process import EngineProcess

    options = EngineOptions(threads=2, settings=NativeOptions(kv="int8"))
    with EngineProcess(name, tiny_model, options=options) as engine:
        config = tiny_model.gpt2_config
        assert engine.info.kv_bytes_per_position == config.n_layer * 2 * (config.n_embd + config.n_head * 4)
        assert "KV cache int8" in engine.info.notes
        tokens, logits = greedy_logits(engine, prompt_ids, 12)  # prefill's tiled attention, then decode's
        reference = hf_reference.logits(prompt_ids + tokens)[len(prompt_ids) - 1 :]
        assert np.abs(logits - reference).max() < max(TOLERANCE[name], 0.3)
        scored = engine.forward_logits(prompt_ids + tokens)
        assert np.abs(scored - hf_reference.logits(prompt_ids + tokens)).max() < max(TOLERANCE[name], 0.3)


def test_the_kv_and_pages_settings_are_checked_and_cli_flags():
    from whistle_stop.backends.cli.parser import build_parser
    from whistle_stop.backends.engines.native_options import NativeOptions

    assert NativeOptions(kv="int4").problem().startswith("--native-kv must be one of fp32, int8")
    assert NativeOptions(kv="int8").problem() == "" and NativeOptions().problem() == ""
    assert NativeOptions(pages="1gb").problem().startswith("--native-pages must be one of 2mb, 4kb")
    assert NativeOptions(pages="4kb").problem() == ""
    args = build_parser().parse_args(["bench", "--backends", "native-int8", "--native-kv", "int8"])
    assert args.native_kv == "int8"
    assert build_parser().parse_args(["bench", "--native-pages", "4kb"]).native_pages == "4kb"


def test_weights_in_4_kb_pages_when_asked(tiny_model, prompt_ids, engines):
    """--native-pages 4kb (for a machine where huge pages are slow to come): the same logits, the
    matrices in a mapping not advised for huge pages, and the notes say so."""
    from whistle_stop.backends.engine import EngineOptions
    from whistle_stop.backends.engines.native_options import NativeOptions

    from .engine_process import EngineProcess

    options = EngineOptions(threads=1, settings=NativeOptions(pages="4kb"))
    with EngineProcess("native-int8", tiny_model, options=options) as engine:
        assert "weights in 4 KB pages (as asked)" in engine.info.notes
        _, _, advised = engine.apply(_stored_weights)
        assert not any(advised)
        small = engine.prefill(prompt_ids)
    np.testing.assert_array_equal(small, engines("native-int8").prefill(prompt_ids))


def _kept_and_fresh_scratch(tiny_model, prompt_ids) -> list:
    """In a child: each type's prefill and two decode steps in the model's kept scratch and in a
    fresh block per step (the scratch hidden, as for a team grown since the model was made), and
    whether the kept one was written."""
    from whistle_stop.backends.engines.native import step
    from whistle_stop.backends.engines.numpy_runtime.model import nest_params
    from whistle_stop.backends.sources.weights import mmap_numpy

    config = tiny_model.gpt2_config
    params = nest_params(mmap_numpy(tiny_model.safetensors), config.n_layer)
    ids = np.array(prompt_ids, np.int32)
    out = []
    for wtype in weights.WeightType:
        model = step.NativeGPT2(params, config, wtype)
        runs = []
        for kept in (False, True):
            model.model.scratch_bytes = model._scratch.nbytes if kept else 0
            runs.append([model.prefill(ids), model.decode(5), model.decode(17)])
            if not kept:
                assert not model._scratch.any()
        out.append((runs, bool(model._scratch.any())))
    return out


def test_the_step_works_in_the_models_kept_scratch(tiny_model, prompt_ids):
    """A step lays its scratch out in the buffer the model keeps (its pages mapped once, not faulted
    again every step: ~350 faults of a 50-token prefill, 2-10 us each on a VM), with the logits of a
    fresh block per step bit for bit (the fallback where the team outgrew the buffer)."""
    for wtype, (runs, written) in zip(weights.WeightType, in_child(_kept_and_fresh_scratch, tiny_model, prompt_ids)):
        fresh, kept = runs
        for a, b in zip(fresh, kept):
            np.testing.assert_array_equal(a, b)
        assert written, wtype
