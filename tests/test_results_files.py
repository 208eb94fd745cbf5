"""docs/results-files.md names every file the commands write, every column of every CSV and every
key of every JSON file, and nothing they do not write.

`bench`, `sweep`, `quality`, `profile` and `report` run for real on random:tiny with the cheapest
engines (`null`, `numpy`), one repeat of a few tokens; the machine probes are stubbed (they are
benchmarks) and so are the charts (rendering costs seconds and is not what is checked here). The
files only a server or a flag writes (`--concurrency`, `--serve-cold-start`) are checked against
the column lists their writers use. A column added without its line in the doc, or a line left for
a column that is gone, fails here.
"""

from __future__ import annotations

import csv
import json
import re
from dataclasses import asdict
from pathlib import Path

import pytest

from tests.test_readme import LINK, _anchors
from whistle_stop.backends.cli.main import main
from whistle_stop.backends.machine.bandwidth import Bandwidth
from whistle_stop.backends.machine.compute_peak import ComputePeaks
from whistle_stop.backends.results.export import SUMMARY_METRICS
from whistle_stop.backends.results.load import LOAD_LEVEL_COLUMNS, LOAD_REQUEST_COLUMNS
from whistle_stop.backends.runs.quality_rows import Divergence
from whistle_stop.backends.serve.cold_start import HEADERS as SERVE_COLD_START_COLUMNS

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "results-files.md"

BANDWIDTH = Bandwidth(10.0, 9.0, 1 << 30, 1, 5, "test cpu", "now")
PEAKS = ComputePeaks(peaks={"fp32": {"gops": 0.5, "median_gops": 0.4, "isa": "test fma"}}, threads=1, cpu="test")
CHEAP = ["--model", "random:tiny", "--repeats", "1", "--warmup", "0", "--prompt-tokens", "4", "--new-tokens", "3"]
COMMANDS = {
    # sampled, so the harness calibration records its sampled figures; no --threads, so
    # environment.json says how the default was resolved
    "bench": ["--backends", "null", "--decoding", "sample"],
    "sweep": ["--backends", "numpy", "--threads", "1"],  # an engine with bytes: a prefill roofline curve
    "quality": ["--backends", "null", "--threads", "1", "--max-length", "16", "--stride", "16"],
    "profile": ["--backends", "numpy", "--threads", "1"],  # a profiler: top operations and a trace
}
# Written only where a cheap run cannot reach: the doc may name them though no run here shows them.
CONDITIONAL = {
    ("gpu_bandwidth",): "a sweep with a CUDA engine",
    ("gpu_compute_peaks",): "a sweep or profile with a CUDA engine",
    ("harness", "error"): "a calibration that failed",
    ("adaptive_repeats",): "bench --repeats auto",
}
FILE_NAME = re.compile(r"[\w<>.-]+\.(?:csv|json|png|html)")

# --- the doc -----------------------------------------------------------------------------------


def _doc_tables() -> dict[str, list[list[list[str]]]]:
    """{heading without its backticks: its tables, each a list of rows, each row its cells}."""
    sections: dict[str, list[list[list[str]]]] = {}
    heading, in_table = "", False
    for line in DOC.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            heading, in_table = line.lstrip("#").strip().replace("`", ""), False
            sections[heading] = []
        elif not line.startswith("|"):
            in_table = False
        elif not in_table:  # a table's header row
            in_table = True
            sections.setdefault(heading, []).append([])
        elif not re.fullmatch(r"\|[-|: ]+\|", line):
            sections[heading][-1].append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return sections


def _names(cell: str) -> list[str]:
    """The names a table cell lists: its backticked words, or the cell itself."""
    return re.findall(r"`([^`]+)`", cell) or [cell]


def documented(file: str, table: int = 0) -> set[str]:
    """The names in the first column of one table of a file's section."""
    tables = _doc_tables().get(file)
    assert tables, f"docs/results-files.md has no section for {file}"
    return {name for row in tables[table] for name in _names(row[0])}


def _section_text(heading: str) -> str:
    text = DOC.read_text(encoding="utf-8")
    start = text.index(f"## {heading}")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else len(text)]


def _as_pattern(name: str) -> re.Pattern:
    """A documented file name as a pattern: `<engine>` stands for any engine's name."""
    return re.compile(re.sub(r"<[^>]+>", r"[^/]+", re.escape(name)))


def _mismatch(kind: str, written: set[str], named: set[str]) -> str:
    return (
        f"{kind}: written but not in docs/results-files.md: {sorted(written - named)}; "
        f"in the doc but not written: {sorted(named - written)}"
    )


# --- JSON key paths ----------------------------------------------------------------------------

KeyPath = tuple[str, ...]


def key_path(name: str) -> KeyPath:
    """`engines.<engine>.dtype` -> ("engines", "<engine>", "dtype"); `a[].b` -> ("a", "[]", "b")."""
    return tuple(part for part in name.replace("[]", ".[].").split(".") if part)


def json_paths(value, prefix: KeyPath = ()) -> set[KeyPath]:
    """Every key path in a JSON value; a list's items are "[]"."""
    out = {prefix} if prefix else set()
    if isinstance(value, dict):
        for key, item in value.items():
            out |= json_paths(item, (*prefix, key))
    elif isinstance(value, list):
        for item in value:
            out |= json_paths(item, (*prefix, "[]"))
    return out


def _matches(doc: KeyPath, path: KeyPath) -> bool:
    """`<name>` in the doc stands for any key (an engine's name), not for a list's items."""
    return len(doc) == len(path) and all(d == p or (d.startswith("<") and p != "[]") for d, p in zip(doc, path))


def undocumented(observed: set[KeyPath], doc: set[KeyPath]) -> list[str]:
    """Observed paths the doc does not cover. A path is covered when the doc names it, names a key
    under it, or names a key above it and nothing under that key: a section whose keys the doc
    lists must have all of them listed (`machine.*`), one it describes whole need not (`libraries`)."""
    leaves = {d for d in doc if not any(len(e) > len(d) and e[: len(d)] == d for e in doc)}

    def covered(path: KeyPath) -> bool:
        return any(
            _matches(d[: len(path)], path) if len(d) >= len(path) else d in leaves and _matches(d, path[: len(d)])
            for d in doc
        )

    return sorted(".".join(p) for p in observed if not covered(p))


def unseen(doc: set[KeyPath], observed: set[KeyPath]) -> list[str]:
    """Documented paths no file here has, but for those only a GPU or a failure writes."""
    return sorted(
        ".".join(d)
        for d in doc
        if not any(_matches(d, p) for p in observed) and not any(d[: len(c)] == c for c in CONDITIONAL)
    )


def _doc_paths(file: str, tables: int = 1) -> set[KeyPath]:
    return {key_path(name) for index in range(tables) for name in documented(file, index)}


# --- the commands ------------------------------------------------------------------------------


def _blank_png(figure, path, *args, **kwargs) -> Path:
    Path(path).write_bytes(b"")
    return Path(path)


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    """{command: its --out folder} after running each command once, and `report` on them all."""
    root = tmp_path_factory.mktemp("results-files")
    text = root / "text.txt"
    text.write_text("The quick brown fox jumps over the lazy dog. " * 8, encoding="utf-8")
    with pytest.MonkeyPatch.context() as patch:
        for target in (
            "machine.bandwidth.cached_bandwidth",  # bench and quality record the cached probes
            "runs.sweep.cached_bandwidth",
            "runs.sweep.probe_bandwidth",
            "runs.profile.fresh_bandwidth",
        ):
            patch.setattr(f"whistle_stop.backends.{target}", lambda *a, **k: BANDWIDTH)
        for target in (
            "machine.compute_peak.cached_compute_peaks",
            "runs.sweep.cached_compute_peaks",
            "runs.sweep.probe_compute_peaks",
            "runs.profile.probe_compute_peaks",
        ):
            patch.setattr(f"whistle_stop.backends.{target}", lambda *a, **k: PEAKS)
        patch.setattr("whistle_stop.backends.report.plots.render_png", _blank_png)
        for command, extra in COMMANDS.items():
            if command == "quality":
                extra = [*extra, "--text", str(text)]
            assert main([command, *CHEAP, *extra, "--out", str(root / command)]) == 0, command
        assert main(["report", *(str(root / c) for c in COMMANDS), "--out", str(root / "report")]) == 0
    return {name: root / name for name in (*COMMANDS, "report")}


def _header(path: Path) -> set[str]:
    with path.open(newline="", encoding="utf-8") as f:
        return set(next(csv.reader(f)))


# --- the tests ---------------------------------------------------------------------------------


def test_every_csv_column_a_command_writes_is_documented_and_no_other(folders):
    problems = []
    for command in COMMANDS:
        for path in sorted(folders[command].glob("*.csv")):
            written, named = _header(path), documented(path.name)
            if written != named:
                problems.append(_mismatch(f"{command}'s {path.name}", written, named))
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    "file, columns",
    [
        ("load_requests.csv", LOAD_REQUEST_COLUMNS),
        ("load.csv", LOAD_LEVEL_COLUMNS),
        ("serve_cold_start.csv", SERVE_COLD_START_COLUMNS),
    ],
)
def test_the_columns_of_files_a_flag_writes_are_documented_and_no_other(file, columns):
    """Written by `--concurrency` (a server engine) and `--serve-cold-start` (a server process):
    their writers' column lists stand in for a run."""
    assert set(columns) == documented(file), _mismatch(file, set(columns), documented(file))


def test_every_summary_metric_is_documented_and_no_other(folders):
    metrics = set(SUMMARY_METRICS) | {"itl_ms_pooled"}
    with (folders["bench"] / "summary.csv").open(newline="", encoding="utf-8") as f:
        assert {row["metric"] for row in csv.DictReader(f)} == metrics  # the constant is what is written
    assert documented("summary.csv", table=1) == metrics, _mismatch("metric", metrics, documented("summary.csv", 1))


def test_environment_json_keys_are_documented_and_no_other(folders):
    environments = {c: json.loads((folders[c] / "environment.json").read_text(encoding="utf-8")) for c in COMMANDS}
    observed = set().union(*(json_paths(env) for env in environments.values()))
    doc = _doc_paths("environment.json", tables=2)
    assert not undocumented(observed, doc), f"not in docs/results-files.md: {undocumented(observed, doc)}"
    assert not unseen(doc, observed), f"documented but written by no command: {unseen(doc, observed)}"
    # the top-level table's "written by" column says which command's file has the key
    for command, env in environments.items():
        expected = {
            row[0].strip("`")
            for row in _doc_tables()["environment.json"][0]
            if {"all", command} & {w.strip() for w in row[1].split(",")} and (row[0].strip("`"),) not in CONDITIONAL
        }
        assert set(env) == expected, _mismatch(f"{command}'s environment.json", set(env), expected)


def test_profile_json_keys_are_documented_and_no_other(folders):
    observed = json_paths(json.loads((folders["profile"] / "profile.json").read_text(encoding="utf-8")))
    doc = _doc_paths("profile.json")
    assert not undocumented(observed, doc), f"not in docs/results-files.md: {undocumented(observed, doc)}"
    assert not unseen(doc, observed), f"documented but not written: {unseen(doc, observed)}"


def test_divergence_json_keys_are_documented_and_no_other(folders):
    """A cheap run's engines never diverge (an empty list): an entry as its writer makes one stands in."""
    written = json.loads((folders["quality"] / "divergence.json").read_text(encoding="utf-8"))
    entry = asdict(Divergence("numpy", "hf", "numpy/r1", 3, 4, {"token_id": 1, "text": "a"}, {}))
    observed = json_paths(written) | json_paths([entry])
    doc = _doc_paths("divergence.json")
    assert not undocumented(observed, doc), f"not in docs/results-files.md: {undocumented(observed, doc)}"
    assert not unseen(doc, observed), f"documented but not written: {unseen(doc, observed)}"


def test_every_file_a_command_writes_is_in_its_row_and_has_a_section(folders):
    overview = {row[0].strip("`"): row[1] for row in _doc_tables()["Which command writes what"][0]}
    sections = set(_doc_tables()) | documented("Charts")
    problems = []
    for command in COMMANDS:
        named = [n for n in _names(overview[command]) if FILE_NAME.fullmatch(n)]
        for path in sorted(folders[command].iterdir()):
            if not any(_as_pattern(n).fullmatch(path.name) for n in named):
                problems.append(f"{command} wrote {path.name}, not in its row of 'Which command writes what'")
        problems += [f"{n} ({command}) has no section or Charts row" for n in named if n not in sections]
    assert not problems, "\n".join(problems)


def test_every_file_report_writes_is_named(folders):
    """report.html, compare_*.png, and <n>-<figure>.png for each figure the section names."""
    named = set(re.findall(r"`([^`]+)`", _section_text("`report`'s folder")))
    for path in sorted(folders["report"].iterdir()):
        figure = re.fullmatch(r"\d+-(\w+)\.png", path.name)
        assert path.name in named or (figure and figure.group(1) in named), path.name


def test_every_link_of_the_page_resolves():
    text = DOC.read_text(encoding="utf-8")
    for target in (t for t in LINK.findall(text) if not re.match(r"^[a-z]+:", t)):
        path, _, anchor = target.partition("#")
        file = (DOC.parent / path) if path else DOC
        assert file.exists(), target
        if anchor and file.suffix == ".md":
            assert anchor in _anchors(file.read_text(encoding="utf-8")), target
