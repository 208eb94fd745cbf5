"""The records every number in the app comes from: one row per token, one row per run."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, fields
from typing import Protocol, TypeVar

from ..status import RunStatus
from ..worker.events import Token
from .stats import decode_rate, finite, first_step_tokens, ms_per_token, run_metrics


class _OfAnEngine(Protocol):
    @property
    def backend(self) -> str: ...


R = TypeVar("R", bound=_OfAnEngine)


def runs_of(records: Iterable[R], backend: str) -> list[R]:
    """The records (runs, tokens, rows) of one engine, in their order."""
    return [r for r in records if r.backend == backend]


@dataclass
class TokenRecord:
    run_id: str
    backend: str
    repeat: int
    is_warmup: bool
    token_index: int
    token_id: int
    text: str
    t_ms: float  # since the request started
    itl_ms: float | None  # gap since the previous token; None for the first token
    phase: str  # "prefill" (first token, includes the prompt) or "decode"
    engine_ms: float | None = None  # the engine's prefill/decode call that produced this token
    harness_ms: float | None = None  # the harness's own work for this token (sampling, detokenizing, sending)
    step: int | None = None  # the engine's step that made it, where a step makes several (Token.step)


@dataclass
class RunRecord:
    run_id: str
    backend: str
    model: str
    weights: str
    device: str
    dtype: str
    threads: int
    prompt_tokens: int
    new_tokens: int
    decoding: str
    temperature: float
    top_k: int
    top_p: float
    seed: int
    repeat: int
    is_warmup: bool
    import_s: float | None
    load_s: float | None
    ttft_ms: float | None
    tpot_ms: float | None
    itl_p50_ms: float | None
    itl_p90_ms: float | None
    itl_p99_ms: float | None
    decode_tok_s: float | None
    e2e_s: float | None
    peak_rss_mb: float | None
    status: RunStatus
    error: str = ""
    # Beyond the core schema: context a reader needs to trust the row.
    tokens_generated: int = 0
    cold_start_s: float | None = None  # worker spawned -> first token, build_s excluded (first run of a worker only)
    bandwidth_gb_s: float | None = None  # weight bytes per token x decode tokens/s
    concurrent: bool = False  # race mode: timings are contended
    reference: str = ""  # the engine this run's tokens are compared with
    agree_tokens: int | None = None  # tokens equal to the reference before the first divergence
    first_divergence: int | None = None
    notes: str = ""
    # Honest context (what the figures above depend on).
    load_peak_rss_mb: float | None = None  # the worker's own peak at Ready (load transients included)
    build_s: float | None = None  # one-time artefact building inside load (load_s and cold_start_s exclude it)
    artifact_cache: str = ""  # "hit", "miss" or "none"
    weights_page_cached: float | None = None  # share of the weights file in the page cache before the worker started
    cpu_s_per_token: float | None = None  # worker user + system CPU seconds per generated token
    harness_ms_per_token: float | None = None  # median harness time per token (sampling, detokenizing, sending)
    native_sampling: bool = False  # the engine samples in its own code: sampled timings are not comparable
    idle_cpu_pct: float | None = None  # CPU the other, idle workers used during this run, % of its wall time
    # ms per decoded token, what every view ranks by: the median ITL, or the TPOT of an engine whose
    # steps make several tokens (multi_token_steps: speculative decoding; its median gap is inside a burst)
    ms_per_token: float | None = None
    multi_token_steps: bool = False
    # tokens made after the first token's step: every token but the first, or, where a step makes
    # several (multi_token_steps), those after the first step (which are in the TTFT): ms/token's count
    decoded_tokens: int | None = None
    # Speculative decoding (speculation.SpeculationStats): accepted / drafted tokens, decoded tokens per
    # target pass, and the draft's and the target's forward time per decoded token
    spec_acceptance: float | None = None
    spec_tokens_per_pass: float | None = None
    spec_draft_ms_per_token: float | None = None
    spec_verify_ms_per_token: float | None = None
    spec_bytes_per_token: float | None = None  # weights + KV both models read per decoded token (the effective floor's)
    isa: str = ""  # the instruction-set level the engine's own kernels ran at (native engines), "" otherwise
    # What the machine was doing during the run (machine/telemetry.py); None where it cannot be read
    steal_pct: float | None = None  # CPU steal, % of the machine's CPU time
    clock_mhz: float | None = None  # the cores' mean clock
    outside_cpu_pct: float | None = None  # CPU used by processes outside the run, % of the machine's
    load_avg_1m: float | None = None
    machine_flag: str = ""  # what passed its threshold ("steal 7.1% > 5%"), "" for a quiet machine
    # Energy (machine/energy.py): measured by a counter, or absent with the reason; never estimated
    energy_j: float | None = None
    energy_j_per_token: float | None = None
    energy_source: str = ""  # "rapl" or "nvml" when measured
    energy_absent: str = ""  # why energy_j is empty

    def __post_init__(self) -> None:
        # A record built by hand or from an older file may carry a plain word: make it the enum.
        self.status = RunStatus.parse(self.status)
        if self.ms_per_token is None:  # a file from before the column, or a record built by hand
            self.ms_per_token = self._ms_per_token()

    def _ms_per_token(self) -> float | None:
        return ms_per_token(
            self.itl_p50_ms, self.tpot_ms, self.multi_token_steps, self.tokens_generated, self.decoded_tokens
        )


TOKEN_COLUMNS = [f.name for f in fields(TokenRecord)]
RUN_COLUMNS = [f.name for f in fields(RunRecord)]


def token_records(
    run_id: str, backend: str, repeat: int, is_warmup: bool, start_ns: int, tokens: list[Token]
) -> list[TokenRecord]:
    rows = []
    previous = None
    for token in tokens:
        rows.append(
            TokenRecord(
                run_id,
                backend,
                repeat,
                is_warmup,
                token.index,
                token.token_id,
                token.text,
                (token.t_ns - start_ns) / 1e6,
                None if previous is None else (token.t_ns - previous) / 1e6,
                "prefill" if token.index == 0 else "decode",
                _ms(token.engine_ns),
                _ms(token.harness_ns),
                token.step,
            )
        )
        previous = token.t_ns
    return rows


def _ms(ns: int | None) -> float | None:
    return None if ns is None else ns / 1e6


def decode_bytes_per_token(
    weight_bytes_per_token: float, kv_bytes_per_position: float, prompt_tokens: int, tokens: int
) -> float:
    """Bytes one decode step reads, averaged over a run's decode steps: the weights once, plus the
    KV cache of every cached position. Token i (1..tokens-1) is decoded with prompt_tokens + i
    positions cached (its own included), so the mean is prompt_tokens + tokens / 2."""
    if tokens < 2:
        return float(weight_bytes_per_token)
    return weight_bytes_per_token + kv_bytes_per_position * (prompt_tokens + tokens / 2)


def fill_metrics(
    record: RunRecord,
    start_ns: int,
    tokens: list[Token],
    weight_bytes_per_token: int,
    kv_bytes_per_position: int = 0,
    bytes_per_token: float | None = None,
    decoded_tokens: int | None = None,
) -> None:
    """vLLM's metrics from the token stamps, and ms/token; GB/s = (weight bytes + the mean KV bytes
    per decode step, at record.prompt_tokens) x decode tokens/s, or `bytes_per_token` (what a
    speculative engine counted it read) x decode tokens/s, with a note when the weights fit in the
    last-level cache (the DRAM limit does not bound them). `decoded_tokens`: what an engine whose
    steps make several tokens made after its first step (the rest came with the first token, in the
    TTFT); its ms/token and tokens/s count those (vLLM's TPOT keeps its own definition). Tokens that
    carry their steps (Token.step) and share one mark the run as such (a server that streams several
    per chunk), its decoded tokens counted from them where the engine gives no count."""
    metrics = run_metrics(start_ns, [t.t_ns for t in tokens])
    record.tokens_generated = metrics.tokens
    record.ttft_ms = finite(metrics.ttft_ms)
    record.tpot_ms = finite(metrics.tpot_ms)
    record.itl_p50_ms = finite(metrics.itl_p50_ms)
    record.itl_p90_ms = finite(metrics.itl_p90_ms)
    record.itl_p99_ms = finite(metrics.itl_p99_ms)
    record.decode_tok_s = finite(metrics.decode_tok_s)
    record.e2e_s = finite(metrics.e2e_s)
    record.decoded_tokens = max(0, metrics.tokens - 1)
    first_step = first_step_tokens([t.step for t in tokens])
    if first_step is not None:  # the engine's steps made several (a server's chunks)
        record.multi_token_steps = True
        if decoded_tokens is None:
            decoded_tokens = metrics.tokens - first_step
    if record.multi_token_steps and decoded_tokens is not None:
        record.decoded_tokens = min(decoded_tokens, record.decoded_tokens)
        _, record.decode_tok_s = decode_rate(metrics, True, record.decoded_tokens)
        if not record.decoded_tokens:
            note = "every token came with the first step's: nothing decoded after it to time (more --new-tokens)"
            record.notes = "; ".join(n for n in (record.notes, note) if n)
    record.ms_per_token = record._ms_per_token()
    if record.decode_tok_s and (weight_bytes_per_token or bytes_per_token):
        per_token = bytes_per_token or decode_bytes_per_token(
            weight_bytes_per_token, kv_bytes_per_position, record.prompt_tokens, metrics.tokens
        )
        record.bandwidth_gb_s = per_token * record.decode_tok_s / 1e9
    if weight_bytes_per_token:
        from ..machine.bandwidth import fits_in_cache_note

        note = fits_in_cache_note(weight_bytes_per_token, record.device or "cpu")
        if note and note not in record.notes:
            record.notes = "; ".join(n for n in (record.notes, note) if n)
