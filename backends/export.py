"""CSV and JSON export of a result set, written atomically."""

from __future__ import annotations

import csv
import json
import math
from dataclasses import asdict
from pathlib import Path
from typing import Iterable

from .atomic import atomic_write, check_writable_dir
from .records import RUN_COLUMNS, TOKEN_COLUMNS, RunRecord, TokenRecord

TOKENS_CSV, RUNS_CSV, ENVIRONMENT_JSON = "tokens.csv", "runs.csv", "environment.json"


def _cell(value) -> object:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.6g}" if abs(value) < 1e6 else f"{value:.1f}"
    return value


def write_csv(path: Path, columns: list[str], rows: Iterable[object]) -> None:
    with atomic_write(path, newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(columns)
        for row in rows:
            data = asdict(row) if not isinstance(row, dict) else row
            writer.writerow([_cell(data.get(c)) for c in columns])


def write_results(out_dir: Path, runs: list[RunRecord], tokens: list[TokenRecord], environment: dict) -> list[Path]:
    """Write tokens.csv, runs.csv and environment.json into `out_dir`; return their paths."""
    out_dir = Path(out_dir)
    check_writable_dir(out_dir)
    write_csv(out_dir / TOKENS_CSV, TOKEN_COLUMNS, tokens)
    write_csv(out_dir / RUNS_CSV, RUN_COLUMNS, runs)
    with atomic_write(out_dir / ENVIRONMENT_JSON, encoding="utf-8") as f:
        json.dump(environment, f, indent=2, default=str)
    return [out_dir / TOKENS_CSV, out_dir / RUNS_CSV, out_dir / ENVIRONMENT_JSON]


def read_csv(path: Path) -> list[dict[str, str]]:
    with Path(path).open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))
