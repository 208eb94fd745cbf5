"""The profile table as text cells: what `profile` prints and the window's Profile tab shows."""

from __future__ import annotations

from ..profilers.categories import ORDER, Category
from ..status import RunStatus
from .breakdown import EngineProfile

SHORT = {
    Category.MATMUL: "matmul",
    Category.ATTENTION: "attn",
    Category.KV_CACHE: "kv",
    Category.NORM_ACTIVATION: "norm/act",
    Category.OTHER_KERNELS: "other",
    Category.ENGINE_UNSPLIT: "engine*",
    Category.FRAMEWORK: "fw+py",
    Category.HARNESS: "harness",
    Category.UNATTRIBUTED: "unattr.",
}
HEADERS = (
    ["backend", "ms/token", "profiled (overhead)", "floor", "probe GB/s", "floor share", "GEMM GFLOP/s", "CPU ms/token"]
    + [SHORT[c] for c in ORDER]
    + ["profiler"]
)
# The prefill table's: the same columns, prefill's figures (its roofline where decode has its floor).
PREFILL_HEADERS = [
    "backend",
    "TTFT ms",
    "profiled",
    "roofline",
    "probe GB/s",
    "roofline share",
    "peak G/s",
    "arithmetic",
] + HEADERS[len(HEADERS) - len(ORDER) - 1 :]


def headers(phase: str) -> list[str]:
    return PREFILL_HEADERS if phase == "prefill" else HEADERS


# The unit of a table's figures, as `profile`'s titles say it: a category column names none of its own.
UNITS = {"decode": "ms per token", "prefill": "ms for the prompt"}


NOTE = (
    "categories: mean ms of the profiled run's steps; ms/token: median of the unprofiled measured runs "
    "(bench's figure); floor: (weights at their stored size + KV read) per token / probe GB/s (not bench's GB/s, "
    "which is the bytes the engine read per second), the faster of two bandwidth probes that read as many "
    "bytes as the engine does per token (caches keep part of a "
    "working set a few times their size; a CUDA engine's read its GPU's memory), just before the engine's "
    "runs and just after it closed (in brackets: the slower "
    "probe, and the floor share it would give, when the two differ: how far the machine moved meanwhile); "
    "GEMM GFLOP/s: how fast the "
    "cores computed at those probes (an in-cache float32 GEMM, the faster; a CUDA engine's: its GPU's float32 "
    "GEMM): a low figure marks a slow phase of "
    "the machine; "
    "engine*: the engine's call where its runtime reports no per-op times; a speculative engine's floor: what "
    "target and draft read per decoded token (the target reads its weights once per pass of several tokens), "
    "so its ms/token may fall below its target's single-token floor; unattr.: the measured step "
    "minus every category; (LLC): the weights fit in the last-level cache (a probe of their size reads from "
    "the cache too, at least 4 MB: a floor of the cache, not of DRAM). Prefill: TTFT is the median of the "
    "unprofiled runs; roofline: the larger of the prompt's FLOPs (matrix products, causal attention, the "
    "lm_head of the last position) over the CPU's peak for the engine's arithmetic (probed in registers "
    "with the instructions named in environment.json; fp32's where the CPU has none for it; a CUDA engine's: "
    "its GPU's cuBLAS GEMM, fp32 without TF32 or bf16) and its bytes "
    "(weights once, the prompt's keys and values) over the probe GB/s; roofline share: roofline / TTFT; the peak is "
    "the machine's best probe (a slow phase only lowers one), and where this profile's own probe read lower, it "
    "and the share it would give are in brackets"
)


def _ms(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _moved(p: EngineProfile) -> bool:
    """Whether the engine's two probes differ enough to show the slower one too."""
    return bool(p.probe_gb_s and p.slower_probe_gb_s and p.slower_probe_gb_s < p.probe_gb_s - 0.05)


def _bandwidth_cell(p: EngineProfile) -> str:
    return _ms(p.probe_gb_s, 1) + (f" ({p.slower_probe_gb_s:.1f})" if _moved(p) else "")


def _share_cell(p: EngineProfile) -> str:
    if p.floor_share is None:
        return "-"
    share, slower = f"{100 * p.floor_share:.0f}%", p.floor_share_at_slower
    at_slower = f"{100 * slower:.0f}%" if _moved(p) and slower else share  # shown only where it differs
    return share + (f" ({at_slower})" if at_slower != share else "") + (" (LLC)" if p.floor_note else "")


def _arithmetic_cell(p: EngineProfile) -> str:
    """Its prefill's arithmetic, and the peak's where another holds it (bf16 without BF16 products: "bf16 (fp32)")."""
    if not p.prefill_arithmetic:
        return "-"
    shown = p.peak_arithmetic and p.peak_arithmetic != p.prefill_arithmetic
    return p.prefill_arithmetic + (f" ({p.peak_arithmetic})" if shown else "")


def _peak_moved(p: EngineProfile) -> bool:
    """Whether this profile's probe of the peak read enough below the machine's best to show both."""
    return bool(p.peak_gops and p.peak_probed_gops and p.peak_probed_gops < 0.97 * p.peak_gops)


def prefill_row(p: EngineProfile) -> list[str]:
    """The prefill table's row: TTFT against its roofline."""
    breakdown = p.prefill
    share = "-" if p.ttft_share is None else f"{100 * p.ttft_share:.0f}%"
    if _peak_moved(p) and p.ttft_share_at_probe is not None and f"{100 * p.ttft_share_at_probe:.0f}%" != share:
        share += f" ({100 * p.ttft_share_at_probe:.0f}%)"  # (a bytes-bound roofline's share does not move: "18% (18%)")
    peak = _ms(p.peak_gops, 0) + (f" ({p.peak_probed_gops:.0f})" if _peak_moved(p) else "")
    head = [
        p.engine,
        _ms(p.ttft_ms, 1),
        _ms(breakdown.step_ms, 1) if breakdown and p.status == RunStatus.OK else "-",
        _ms(p.roofline_ms, 1),
        _ms(p.probe_gb_s, 1),
        share,
        peak,
        _arithmetic_cell(p),
    ]
    if p.status != RunStatus.OK or breakdown is None:
        return head + ["-"] * len(ORDER) + [str(p.status) if p.status != RunStatus.OK else p.profiler]
    return head + [_ms(breakdown.categories.get(c.value)) for c in ORDER] + [p.profiler]


def profile_row(p: EngineProfile, phase: str = "decode") -> list[str]:
    """The row of the decode table (per decoded token, against the memory floor) or the prefill table."""
    if phase == "prefill":
        return prefill_row(p)
    breakdown = p.decode
    share, bandwidth = _share_cell(p), _bandwidth_cell(p)
    head = [p.engine, _ms(p.ms_per_token)]
    if p.status != RunStatus.OK or breakdown is None:
        return (
            head
            + ["-", _ms(p.floor_ms), bandwidth, share, _ms(p.probe_compute_gflops, 0), _ms(p.cpu_ms_per_token)]
            + ["-"] * len(ORDER)
            + [str(p.status) if p.status != RunStatus.OK else p.profiler]
        )
    overhead = "" if p.overhead_pct is None else f" ({p.overhead_pct:+.0f}%)"
    return (
        head
        + [
            _ms(p.profiled_ms_per_token) + overhead,
            _ms(p.floor_ms),
            bandwidth,
            share,
            _ms(p.probe_compute_gflops, 0),
            _ms(p.cpu_ms_per_token),
        ]
        + [_ms(breakdown.categories.get(c.value)) for c in ORDER]
        + [p.profiler]
    )


def shown_columns(rows: list[list[str]]) -> list[int]:
    """Indexes of the columns to print: a category that is empty for every engine is left out."""
    fixed = len(HEADERS) - len(ORDER) - 1
    return [
        i
        for i in range(len(HEADERS))
        if i < fixed or i == len(HEADERS) - 1 or any(row[i] not in ("-", "0.00", "-0.00") for row in rows)
    ]


def speculation_line(p: EngineProfile) -> str:
    """How a speculative engine can run below its target's single-token floor without beating memory:
    one target pass reads the weights once for several tokens, so the bytes per decoded token, and the
    floor they set, fall with the tokens per pass."""
    if p.spec_tokens_per_pass is None:
        return ""
    line = f"{p.engine}: speculative, {p.spec_tokens_per_pass:.2f} tokens per target pass"
    if p.spec_acceptance is not None:
        line += f" (acceptance {100 * p.spec_acceptance:.0f}%)"
    if p.spec_draft_ms_per_token is not None and p.spec_verify_ms_per_token is not None:
        line += f", draft {p.spec_draft_ms_per_token:.2f} + verify {p.spec_verify_ms_per_token:.2f} ms per token"
    single, floor = p.single_token_floor_ms, p.floor_ms
    if single is not None and floor is not None and p.bytes_per_token and p.single_token_bytes:
        line += (
            f"; its floor is per decoded token: {p.bytes_per_token / 1e6:.0f} MB read per token (target and draft) "
            f"against the target's {p.single_token_bytes / 1e6:.0f} MB alone, {floor:.2f} ms against a single-token "
            f"floor of {single:.2f} ms"
        )
        if p.ms_per_token is not None and p.ms_per_token < single:
            line += (
                f"; at {p.ms_per_token:.2f} ms/token it is below the single-token floor "
                f"({p.ms_per_token / single:.2f}x): each target pass reads the weights once for several tokens, "
                "so no memory limit is broken"
            )
    return line


def engine_lines(p: EngineProfile, top_ops: bool = True) -> list[str]:
    """What `profile` says under its tables about one engine: why it did not finish, or its top decode
    operations (`top_ops`), how a speculative engine beats its target's floor, and its profiler's note."""
    if p.status != RunStatus.OK:
        return [f"{p.engine}: {p.status}" + (f": {p.error}" if p.error else "")]
    lines = [
        top_ops_line(p) if top_ops else "",
        speculation_line(p),
        f"{p.engine}: {p.profiler}: {p.note}" if p.note else "",
    ]
    return [line for line in lines if line]


def top_ops_line(p: EngineProfile, count: int = 5) -> str:
    ops = [f"{o.name} {o.ms_per_step:.2f} ms ({100 * o.share:.0f}%)" for o in p.top_ops if o.phase == "decode"]
    return f"{p.engine} top decode ops: {', '.join(ops[:count])}" if ops else ""
