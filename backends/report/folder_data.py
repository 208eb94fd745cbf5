"""A results folder as the reports read it (bench, sweep, quality, profile or load runs): its records,
environment and quality rows, what kind of folder it is, its figures, its verdict and what a cancel kept.
The HTML page (html.py) and the Markdown copy (markdown.py) both render from this."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from ..profile.files import read_profile
from ..results.load import LoadLevel, LoadRequestRecord, Slo, session_levels
from ..results.reader import load_requests, load_results
from ..results.records import RunRecord, TokenRecord, runs_of
from ..results.stats import summarize
from ..results.summary import runs_kept
from ..results.verdict import Verdict, verdict
from ..runs.quality import read_quality
from . import figures as fg
from .sweep_figures import itl_vs_position, sweep_figures


@dataclass
class FolderData:
    path: Path
    runs: list[RunRecord]
    tokens: list[TokenRecord]
    environment: dict
    quality: list[dict] = field(default_factory=list)
    divergences: list[dict] = field(default_factory=list)
    profiles: list = field(default_factory=list)  # profile.breakdown.EngineProfile, from a `profile` folder
    load: list[LoadRequestRecord] = field(default_factory=list)  # load_requests.csv: rounds above concurrency 1

    @property
    def kind(self) -> str:
        if self.profiles:
            return "profile"
        if self.quality:
            return "quality"
        return "sweep" if "sweep" in self.environment else "bench"

    @property
    def label(self) -> str:
        return self.path.name or str(self.path)

    @property
    def gb_s(self) -> float | None:
        return (self.environment.get("bandwidth") or {}).get("gb_s")

    @property
    def slo(self) -> Slo:
        """The goodput SLO the run was given (environment.json's settings), if any."""
        settings = self.environment.get("settings") or {}
        return Slo(settings.get("slo_ttft_ms"), settings.get("slo_itl_ms"))

    @property
    def load_levels(self) -> list[LoadLevel]:
        """Per engine and concurrency level, as `bench --concurrency` wrote load.csv: level 1 from
        the bench runs, the others from the load rounds ([] without load runs)."""
        if not self.load:
            return []
        return session_levels(self.runs, self.tokens, self.load, self.slo)

    @property
    def backends(self) -> list[str]:
        settings = self.environment.get("settings") or {}
        return list(settings.get("backends") or dict.fromkeys(r.backend for r in self.runs))


def load_folder(folder: Path) -> FolderData:
    folder = Path(folder)
    quality, divergences = read_quality(folder)
    if quality and not (folder / "runs.csv").exists():
        environment = (
            json.loads((folder / "environment.json").read_text(encoding="utf-8"))
            if (folder / "environment.json").exists()
            else {}
        )
        return FolderData(folder, [], [], environment, quality, divergences)
    runs, tokens, environment = load_results(folder)
    return FolderData(
        folder, runs, tokens, environment, quality, divergences, read_profile(folder), load_requests(folder)
    )


def folder_figures(data: FolderData) -> list[fg.Figure]:
    env, gb_s = data.environment, data.gb_s
    if data.kind == "sweep":
        return sweep_figures(data.runs, data.tokens, env, gb_s)
    out = []
    if data.kind == "profile":
        return [fg.profile_breakdown(data.profiles, "decode"), fg.profile_breakdown(data.profiles, "prefill")]
    if data.kind == "quality":
        out.append(fg.speed_vs_quality(data.quality, (env.get("model") or {}).get("weights") == "random"))
    if data.runs:
        out += [
            fg.bench_bars(data.runs, "decode_tok_s", data.label),
            fg.bench_bars(data.runs, "ttft_ms", data.label),
            fg.startup_bars(data.runs),
            itl_vs_position(data.runs, data.tokens, gb_s, env),
        ]
    return out


def comparison_figures(folders: list[FolderData]) -> list[fg.Figure]:
    """Each engine's median per folder, folders side by side; a sweep's folder is left out (its runs
    are many prompt and output lengths: one median of them all compares with nothing), and said so."""
    sweeps = [f"{index}: {data.label}" for index, data in enumerate(folders, start=1) if data.kind == "sweep"]
    out = []
    for metric, title, unit in (
        ("decode_tok_s", "Decode speed by folder", "decode tokens/s"),
        ("ttft_ms", "Time to first token by folder", "TTFT (ms)"),
    ):
        groups = {}
        for index, data in enumerate(folders, start=1):
            if data.kind == "sweep":
                continue
            measured = fg.measured(data.runs)
            groups[f"{index}: {data.label}"] = {
                b: summarize([getattr(r, metric) for r in runs_of(measured, b)])
                for b in dict.fromkeys(r.backend for r in measured)
            }
        figure = fg.bars(title, unit, groups, f"compare_{metric}")
        if sweeps:
            figure.note = f"left out: {', '.join(sweeps)}, a sweep (its cells are compared in its own charts)"
        out.append(figure)
    return out


def cancelled_note(data: FolderData) -> str:
    """What a cancelled command kept, in the words it printed (summary.runs_kept), so that a
    partial folder never reads as a complete one; "" for a folder whose command ran to its end."""
    if not data.environment.get("cancelled"):
        return ""
    if not data.runs:
        return "cancelled: partial results"
    settings = data.environment.get("settings") or {}
    per_cell = len(data.backends) * int(settings.get("repeats") or 0)
    sweep = data.environment.get("sweep")
    if sweep is None:
        return f"cancelled: {runs_kept(data.runs, per_cell)}; partial results"
    # a sweep keeps the runs of the cells it finished; the others run again on resume
    done = {tuple(key) for key in sweep.get("completed") or []}
    cells = len(done) + len(sweep.get("pending") or [])
    kept = runs_kept([r for r in data.runs if (r.prompt_tokens, r.new_tokens) in done], per_cell * cells)
    return f"cancelled: {kept} ({len(done)} of {cells} cells complete); partial results"


def folder_verdict(data: FolderData, folders: list[FolderData]) -> Verdict | None:
    """The verdict on a folder's runs (none for a sweep: its cells are not one comparison), with
    the perplexity change from its own quality rows, or from a quality folder of the same model."""
    if data.kind == "sweep" or not data.runs:
        return None
    quality = data.quality or next((f.quality for f in folders if f.quality and _same_model(f, data)), [])
    return verdict(data.runs, data.backends, data.environment.get("reference"), quality, not data.profiles)


def _same_model(a: FolderData, b: FolderData) -> bool:
    hashes = [(d.environment.get("model") or {}).get("weights_sha256_16") for d in (a, b)]
    return bool(hashes[0]) and hashes[0] == hashes[1]


# --- HTML ----------------------------------------------------------------------------------
