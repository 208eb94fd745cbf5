"""Scripted run records for the tests of what is computed from them (verdict, reports, rounds)."""

from __future__ import annotations

from typing import Any

from whistle_stop.backends.results.records import RunRecord


def run_record(backend: str = "hf", repeat: int = 1, *, itl: float | None = 2.0, **fields: Any) -> RunRecord:
    """A measured, finished run of `backend` with plausible figures (`itl` ms between tokens, 10 ms
    to the first); `fields` set any other RunRecord field."""
    base: dict[str, Any] = dict(
        run_id=f"{backend}/r{repeat}",
        backend=backend,
        model="m",
        weights="real",
        device="cpu",
        dtype="fp32",
        threads=1,
        prompt_tokens=8,
        new_tokens=20,
        decoding="greedy",
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        seed=0,
        repeat=repeat,
        is_warmup=False,
        import_s=0.1,
        load_s=0.2,
        ttft_ms=10.0,
        tpot_ms=itl,
        itl_p50_ms=itl,
        itl_p90_ms=itl,
        itl_p99_ms=itl,
        decode_tok_s=None if itl is None else 1e3 / itl,
        e2e_s=1.0,
        peak_rss_mb=100.0,
        status="ok",
    )
    return RunRecord(**{**base, **fields})


ROUND_ENGINES = ("hf", "native", "onnx", "llamacpp-q8_0")


def rounds(slow: dict[int, tuple[str, ...]], factor: float = 2.0, prompt: int = 50) -> list[RunRecord]:
    """Five fair rounds of ROUND_ENGINES, each engine's TTFT `factor` times its usual in the repeats
    `slow` names it in (the others' figures vary a little, as real runs do)."""
    return [
        run_record(
            name,
            repeat,
            ttft_ms=(10.0 + repeat * 0.1) * (factor if name in slow.get(repeat, ()) else 1.0),
            prompt_tokens=prompt,
            threads=2,
            reference="hf",
        )
        for repeat in range(1, 6)
        for name in ROUND_ENGINES
    ]
