"""CSV and JSON export of a result set, written atomically."""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ..storage.atomic import atomic_write, check_writable_dir
from .load import LOAD_LEVEL_COLUMNS, LOAD_REQUEST_COLUMNS, LoadRequestRecord, Slo, session_levels
from .records import RUN_COLUMNS, TOKEN_COLUMNS, RunRecord, TokenRecord

TOKENS_CSV, RUNS_CSV, ENVIRONMENT_JSON = "tokens.csv", "runs.csv", "environment.json"
LOAD_REQUESTS_CSV, LOAD_CSV = "load_requests.csv", "load.csv"
SUMMARY_CSV = "summary.csv"
SUMMARY_METRICS = (
    "ttft_ms",
    "ms_per_token",
    "itl_p50_ms",
    "tpot_ms",
    "decode_tok_s",
    "bandwidth_gb_s",
    "cpu_s_per_token",
)
# median_ci_*: the median's distribution-free interval (order statistics) and its exact level, the
# interval every view shows with the median; mean_ci95_*: the mean's Student t 95% interval (was
# ci95_low/ci95_high, renamed: beside the median it read as the median's). The metric
# "itl_ms_pooled" pools every inter-token gap of the measured runs: n counts gaps, median/p90/p99
# are the pooled p50/p90/p99, no intervals. note: why an engine's figures are not comparable.
SUMMARY_COLUMNS = [
    "backend",
    "metric",
    "n",
    "median",
    "median_ci_low",
    "median_ci_high",
    "median_ci_level",
    "mean",
    "mean_ci95_low",
    "mean_ci95_high",
    "p90",
    "p99",
    "std",
    "min",
    "max",
    "note",
]


def format_number(value: float) -> str:
    """A float as the CSVs write it (and the window's table shows it): 6 significant digits below
    1,000; above, 9 without an exponent, so a token's time in a long run keeps its microseconds
    (32,512.3457 ms, not 32,512.3: Replay and a reopened session rebuild the gaps from it)."""
    if abs(value) < 1e3 or not math.isfinite(value):
        return f"{value:.6g}"
    text = f"{value:.{max(0, 8 - int(math.log10(abs(value))))}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def _cell(value) -> object:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return format_number(value)
    return value


def write_csv(path: Path, columns: list[str], rows: Iterable[Any]) -> None:  # dataclass records or dicts
    with atomic_write(path, newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(columns)
        for row in rows:
            data = asdict(row) if not isinstance(row, dict) else row
            writer.writerow([_cell(data.get(c)) for c in columns])


def write_results(
    out_dir: Path,
    runs: list[RunRecord],
    tokens: list[TokenRecord],
    environment: dict,
    summary: bool = True,
    load: list[LoadRequestRecord] | None = None,
    slo: Slo = Slo(),
) -> list[Path]:
    """Write tokens.csv, runs.csv, summary.csv (per engine, across measured repeats; left out for
    sweeps, whose rows mix cells) and environment.json into `out_dir`; return their paths. With
    load runs: load_requests.csv (a row per request of concurrency > 1) and load.csv (a row per
    engine and level, level 1 from the bench runs)."""
    out_dir = Path(out_dir)
    check_writable_dir(out_dir)
    write_csv(out_dir / TOKENS_CSV, TOKEN_COLUMNS, tokens)
    write_csv(out_dir / RUNS_CSV, RUN_COLUMNS, runs)
    paths = [out_dir / TOKENS_CSV, out_dir / RUNS_CSV]
    if summary:
        write_csv(out_dir / SUMMARY_CSV, SUMMARY_COLUMNS, summary_rows(runs, tokens))
        paths.append(out_dir / SUMMARY_CSV)
    if load:
        write_csv(out_dir / LOAD_REQUESTS_CSV, LOAD_REQUEST_COLUMNS, load)
        write_csv(out_dir / LOAD_CSV, LOAD_LEVEL_COLUMNS, session_levels(runs, tokens, load, slo))
        paths += [out_dir / LOAD_REQUESTS_CSV, out_dir / LOAD_CSV]
    with atomic_write(out_dir / ENVIRONMENT_JSON, encoding="utf-8") as f:
        json.dump(environment, f, indent=2, default=str)
    return paths + [out_dir / ENVIRONMENT_JSON]


def summary_rows(runs: list[RunRecord], tokens: list[TokenRecord] | None = None) -> list[dict]:
    """One row per engine and metric: the spread of that metric across measured runs, then the
    inter-token gaps of those runs pooled (itl_ms_pooled)."""
    from .summary import sampling_note, speculation_note, summarize_backends

    rows = []
    for backend in summarize_backends(runs, tokens=tokens):
        note = "; ".join(
            n for n in (sampling_note(backend) if not backend.comparable else "", speculation_note(backend)) if n
        )
        for metric in SUMMARY_METRICS + ("itl_ms_pooled",):
            summary = backend.itl_pooled_ms if metric == "itl_ms_pooled" else getattr(backend, metric)
            if metric == "itl_ms_pooled" and not summary.n:
                continue
            rows.append({"backend": backend.backend, "metric": metric, **asdict(summary), "note": note})
    return rows


def read_csv(path: Path) -> list[dict[str, str]]:
    with Path(path).open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))
