"""quality.csv and divergence.json: writing them beside a session's results, and reading them back."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from ..results.export import read_csv, write_csv, write_results
from ..status import RunStatus
from ..storage.atomic import atomic_write
from .quality_rows import QUALITY_COLUMNS, QualityResult, QualityRow
from .result import BenchResult

QUALITY_CSV, DIVERGENCE_JSON = "quality.csv", "divergence.json"


def write_quality(out_dir: Path, result: BenchResult, quality: QualityResult) -> list[Path]:
    """quality.csv, divergence.json and the session's runs/tokens/environment, each written atomically."""
    out_dir = Path(out_dir)
    paths = write_results(out_dir, result.runs, result.tokens, result.environment)
    write_csv(out_dir / QUALITY_CSV, QUALITY_COLUMNS, quality.rows)
    with atomic_write(out_dir / DIVERGENCE_JSON, encoding="utf-8") as f:
        json.dump([asdict(d) for d in quality.divergences], f, indent=2, ensure_ascii=False)
    return paths + [out_dir / QUALITY_CSV, out_dir / DIVERGENCE_JSON]


def read_quality(folder: Path) -> tuple[list[dict], list[dict]]:
    """(quality rows with numbers parsed, divergences) from a quality folder; empty if absent."""
    folder = Path(folder)
    rows = []
    if (folder / QUALITY_CSV).exists():
        for raw in read_csv(folder / QUALITY_CSV):
            row: dict = {}
            for key, cell in raw.items():
                kind = str(getattr(QualityRow.__dataclass_fields__.get(key), "type", "str"))
                if cell in ("", None):
                    row[key] = "" if kind in ("str", "RunStatus") else None
                elif kind == "RunStatus":
                    row[key] = RunStatus.parse(cell)
                elif kind.startswith(("int", "float")):
                    try:
                        row[key] = int(float(cell)) if kind.startswith("int") else float(cell)
                    except ValueError:
                        row[key] = None
                else:
                    row[key] = cell
            rows.append(row)
    divergences = []
    if (folder / DIVERGENCE_JSON).exists():
        try:
            divergences = json.loads((folder / DIVERGENCE_JSON).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            divergences = []
    return rows, divergences
