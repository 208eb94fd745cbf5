"""The CLI's tables print every figure whole: at their natural width off a terminal, in groups of
columns that repeat the key columns on a narrow one, never a cell cut to "…"."""

from __future__ import annotations

import io
from types import SimpleNamespace

from rich.cells import cell_len
from rich.console import Console

from whistle_stop.backends.cli.tables import TextTable, print_table

WIDTH = 100


def _terminal() -> Console:
    return Console(file=io.StringIO(), width=WIDTH, force_terminal=True, color_system=None)


def _pipe() -> Console:
    # force_terminal=False: FORCE_COLOR in a CI's environment must not make the StringIO a terminal
    return Console(file=io.StringIO(), width=WIDTH, force_terminal=False, color_system=None)


def _printed(console: Console) -> str:
    file = console.file
    assert isinstance(file, io.StringIO)
    return file.getvalue()


def _tables(printed: str) -> list[list[str]]:
    """Each printed table's lines, from its top border to its bottom one."""
    tables: list[list[str]] = []
    inside = False
    for line in printed.splitlines():
        if line.startswith("┏"):
            tables.append([])
            inside = True
        if inside:
            tables[-1].append(line)
        if line.startswith("└"):
            inside = False
    return tables


def _row_lines(table: list[str]) -> list[str]:
    """A table's body lines, below the line under its header."""
    body = table[next(i for i, line in enumerate(table) if line.startswith("┡")) + 1 :]
    return [line for line in body if line.startswith("│")]


def _assert_whole(printed: str, headers: list[str], rows: list[list[str]], keys: int, terminal: bool) -> None:
    """Every cell whole on its row's line, no "…", the key columns in every group; on the terminal
    each line within its width, off it one table at its natural width."""
    assert "…" not in printed
    tables = _tables(printed)
    assert tables
    for table in tables:
        header = " ".join(" ".join(line.strip("┃ ").split()) for line in table[: len(table) - len(rows)])
        assert all(name in header for name in headers[:keys]), header
        for row, line in zip(rows, _row_lines(table), strict=True):
            assert all(f" {cell} " in line for cell in row[:keys]), line
    for number, row in enumerate(rows):
        lines = [_row_lines(table)[number] for table in tables]
        for cell in row:
            assert any(f" {cell} " in line for line in lines), (cell, lines)
    # the tables' lines and their titles' (the notes under them print as they always have)
    lines = printed.splitlines()
    titles = [lines[i - 1] for i, line in enumerate(lines) if i and line.startswith("┏")]
    widths = [cell_len(line.rstrip()) for line in titles + [line for table in tables for line in table]]
    if terminal:
        assert max(widths) <= WIDTH and len(tables) > 1  # the tables here are all wider than the terminal
    else:
        assert len(tables) == 1 and max(widths) > WIDTH


def _bench_result():
    from tests.test_stats import _run
    from whistle_stop.backends.runs.bench import BenchConfig
    from whistle_stop.backends.runs.result import BenchResult

    backends = ("numpy", "native-int4-long")
    runs = [_run(name, r, 0.0004 + r * 0.0003 + i * 0.001) for i, name in enumerate(backends) for r in range(3)]
    config = BenchConfig(model="random:tiny", backends=backends, new_tokens=4)
    model = SimpleNamespace(label="random:tiny", is_random=True)
    return BenchResult(config, model, [1, 2, 3, 4], runs, [], {"reference": "numpy"})


def _summary_rows(result) -> list[list[str]]:
    from whistle_stop.backends.results.summary import summarize_backends, summary_rows

    summaries = summarize_backends(result.runs, list(result.config.backends), result.tokens)
    return summary_rows(summaries, "numpy")


def test_the_bench_summary_is_whole_in_a_narrow_terminal_and_in_a_pipe():
    from whistle_stop.backends.cli.bench_command import print_summary
    from whistle_stop.backends.results.summary import SUMMARY_HEADERS

    result = _bench_result()
    rows = _summary_rows(result)
    assert any(cell_len(cell) >= 15 for row in rows for cell in row)  # an interval: "2.0 [1.2–3.4]"
    for console, terminal in ((_terminal(), True), (_pipe(), False)):
        print_summary(result, console)
        printed = _printed(console)
        _assert_whole(printed, SUMMARY_HEADERS, rows, keys=2, terminal=terminal)
        assert "medians of measured runs" in printed and "Verdict" in printed  # the notes under it stay


def test_the_profile_tables_are_whole_in_a_narrow_terminal_and_in_a_pipe(tmp_path):
    from tests.test_profile import _profile
    from whistle_stop.backends.cli.profile_command import print_profile
    from whistle_stop.backends.profile.table import headers, profile_row, shown_columns

    result = _profile(tmp_path, ["null", "numpy"], new_tokens=4)
    for console, terminal in ((_terminal(), True), (_pipe(), False)):
        print_profile(result, console)
        printed = _printed(console)
        decode, prefill = printed.split("prefill step")
        for phase, part in (("decode", decode), ("prefill", prefill)):
            rows = [profile_row(p, phase) for p in result.profiles]
            columns = shown_columns(rows)
            shown = [[row[i] for i in columns] for row in rows]
            _assert_whole(part, [headers(phase)[i] for i in columns], shown, keys=1, terminal=terminal)
        assert "categories: mean ms" in printed


def test_groups_say_which_columns_they_hold():
    table = TextTable(
        "a wide table",
        ["engine", *(f"figure {n}" for n in range(1, 13))],
        [["numpy", *(f"{n * 1111.1:.1f} [{n:.1f}–{n * 2222.2:.1f}]" for n in range(1, 13))]],
    )
    console = _terminal()
    print_table(console, table)
    lines = [line.strip() for line in _printed(console).splitlines()]
    titles = [line for line in lines if line.startswith("columns")]
    assert lines[0] == "a wide table" and titles[0].startswith("columns 1–")  # the title once, then the columns
    assert titles[-1].endswith("of 13 (continued)") and len(titles) == len(_tables(_printed(console))) > 2


def test_a_column_wider_than_the_terminal_prints_whole_and_prose_wraps_at_spaces():
    figure = "1234567890." * 12  # one word: nothing may cut it, so the terminal wraps its line
    sentence = " ".join(["the engine's reason, said in words"] * 6)
    table = TextTable(
        "engines", ["engine", "figure", "why"], [["numpy", figure, sentence]], left=("engine", "why"), prose=("why",)
    )
    console = _terminal()
    print_table(console, table)
    printed = _printed(console)
    assert "…" not in printed
    whole, wrapped = _tables(printed)
    assert any(figure in line for line in whole) and max(cell_len(line) for line in whole) > WIDTH
    assert max(cell_len(line) for line in wrapped) <= WIDTH and "numpy" in _row_lines(wrapped)[0]
    why = " ".join(line.split("│")[-2].strip() for line in _row_lines(wrapped))
    assert why == sentence  # wrapped at spaces, every word whole


def test_a_long_error_is_cut_visibly_and_a_short_one_whole():
    """A status cell cut with no mark read as the whole message ("crashed: ...[:80]"); the cut shows now,
    and a status without an error reads alone, not "cancelled: "."""
    from whistle_stop.backends.results.summary import STATUS_CELL_MOST, status_cell

    long = "RuntimeError: " + "x" * 300
    cell = status_cell("error", long)
    assert len(cell) == STATUS_CELL_MOST and cell.endswith("…") and cell.startswith("error: RuntimeError: x")
    assert (
        status_cell("crashed", "worker process was killed by SIGKILL")
        == "crashed: worker process was killed by SIGKILL"
    )
    assert status_cell("cancelled", "") == "cancelled" and status_cell("ok", "") == "ok"
