"""Every table the CLI prints, whole: no cell is ever cut short.

A truncated figure is a wrong number, so a table never shrinks a cell below its text. On a file or a
pipe (a CI log) it prints at its natural width, however wide. On a terminal narrower than the table
its columns are split into as few consecutive groups as fit, as even as that many can be, each
repeating the key columns that name a row (the engine, its dtype): the first under the table's title
and a line "columns 1–9 of 17", the others under "columns 10–17 of 17 (continued)". Headers wrap at
spaces; figures never wrap; prose columns (a status, a description) wrap at spaces. A group that does
not fit even as its keys and one column prints at its natural width, and the terminal wraps its lines."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from rich.cells import cell_len
from rich.console import Console
from rich.markup import escape
from rich.measure import Measurement
from rich.segment import Segments
from rich.table import Table
from rich.text import Text

# Wide enough for any table's natural width: measuring must never be what limits it.
_UNBOUNDED = 1_000_000
# The narrowest a sentence's lines may get: a few words each, still read as a sentence.
_PROSE_LINE = 30


@dataclass(frozen=True)
class TextTable:
    """A table as its text: headers and rows of cells, printed by `print_table`."""

    title: str
    headers: Sequence[str]
    rows: Sequence[Sequence[str]]
    keys: int = 1  # the leading columns that name a row, repeated in every group
    left: Collection[str] = ()  # headers of the columns aligned left (names); the others are figures, aligned right
    prose: Collection[str] = ()  # headers of the columns whose text may wrap at spaces (sentences, not figures)
    row_styles: Sequence[str | None] = ()  # one per row where rows differ (a greyed unavailable engine)


@dataclass(frozen=True)
class _Span:
    """A column's widths in cells: the least that cuts nothing, and the most it can use."""

    least: int  # its widest figure (a prose column's: lines of a few words) and its header's longest word
    most: int  # every cell and the header on one line


def print_table(console: Console, table: TextTable) -> None:
    """Print `table` whole: at its natural width off a terminal, in groups of columns on a narrow one."""
    if not console.is_terminal:
        _print_whole(console, _rich_table(table, range(len(table.headers)), table.title))
        return
    spans = [_span(table, index) for index in range(len(table.headers))]
    groups = _groups(console, table, spans)
    for number, group in enumerate(groups):
        columns = list(range(table.keys)) + group
        title = table.title if len(groups) == 1 else _group_title(table, group, first=number == 0)
        least = _rich_table(table, columns, title, [spans[i].least for i in columns])
        spare = console.width - _width(console, least)
        if spare < 0:  # not even the key and one column fit: whole lines the terminal wraps beat cut figures
            _print_whole(console, _rich_table(table, columns, title))
        else:
            console.print(_rich_table(table, columns, title, _widen([spans[i] for i in columns], spare)))


def _groups(console: Console, table: TextTable, spans: list[_Span]) -> list[list[int]]:
    """The non-key columns in as few consecutive groups as fit the terminal, as even in width as that
    many groups can be: the narrowest limit that first fit packs into no more groups than the terminal's
    width does (first fit makes the fewest groups under a limit, and never more under a wider one)."""
    fewest = len(_first_fit(console, table, spans, console.width))
    low, high = 1, console.width
    while low < high:
        limit = (low + high) // 2
        if len(_first_fit(console, table, spans, limit)) <= fewest:
            high = limit
        else:
            low = limit + 1
    return _first_fit(console, table, spans, low)


def _first_fit(console: Console, table: TextTable, spans: list[_Span], limit: int) -> list[list[int]]:
    """The non-key columns in order, each group taking columns while it fits `limit` beside the keys
    (a column that fits with nothing else is a group of its own)."""
    keys = list(range(table.keys))
    groups: list[list[int]] = [[]]
    for index in range(table.keys, len(table.headers)):
        candidate = keys + groups[-1] + [index]
        least = _rich_table(table, candidate, "", [spans[i].least for i in candidate])
        if groups[-1] and _width(console, least) > limit:
            groups.append([])
        groups[-1].append(index)
    return groups


def _group_title(table: TextTable, group: list[int], first: bool) -> str:
    """The first group's: the table's title and its columns (the keys' included); the others': theirs."""
    start, end = 1 if first else group[0] + 1, group[-1] + 1
    shown = (
        f"column {end} of {len(table.headers)}" if start == end else f"columns {start}–{end} of {len(table.headers)}"
    )
    return f"{table.title}\n{shown}" if first else f"{shown} (continued)"


def _span(table: TextTable, index: int) -> _Span:
    cells = [row[index] for row in table.rows]
    header = table.headers[index]
    fit = _prose_width if header in table.prose else _line_width
    return _Span(
        least=max([fit(cell) for cell in cells] + [_longest_word(header), 1]),
        most=max([_line_width(cell) for cell in cells] + [_line_width(header), 1]),
    )


def _widen(spans: list[_Span], spare: int) -> list[int]:
    """Each column at its least, then the spare cells to the columns that need fewest to reach their
    most: as many headers as possible on one line, and a prose column takes what is left."""
    widths = [span.least for span in spans]
    for index in sorted(range(len(spans)), key=lambda i: spans[i].most - spans[i].least):
        grant = min(spans[index].most - widths[index], spare)
        widths[index] += grant
        spare -= grant
    return widths


def _rich_table(table: TextTable, columns: Sequence[int], title: str, widths: Sequence[int] | None = None) -> Table:
    """The rich table of `columns`, each at its fixed width, or at its natural width without `widths`."""
    shown = Table(title=escape(title) if title else None)
    for position, index in enumerate(columns):
        header = table.headers[index]
        shown.add_column(
            header,
            justify="left" if header in table.left else "right",
            width=None if widths is None else widths[position],
            overflow="fold",  # never "…": were a width ever short, the text goes on the next line
        )
    for number, row in enumerate(table.rows):
        style = table.row_styles[number] if number < len(table.row_styles) else None
        # Text, not markup: a cell is shown as it is ("[2.0–7.0]" is a figure, not a tag)
        shown.add_row(*(Text(row[index]) for index in columns), style=style)
    return shown


def _width(console: Console, table: Table) -> int:
    return Measurement.get(console, console.options.update_width(_UNBOUNDED), table).maximum


def _print_whole(console: Console, table: Table) -> None:
    """Render at the table's natural width and print uncropped: Console.print caps a width at the console's."""
    options = console.options.update_width(_width(console, table))
    lines = console.render_lines(table, options, pad=False, new_lines=True)
    console.print(Segments([segment for line in lines for segment in line]), crop=False)


def _line_width(text: str) -> int:
    return max((cell_len(line) for line in text.splitlines()), default=0)


def _prose_width(text: str) -> int:
    """A sentence's narrowest width: its longest word, and lines of a few words (no column of one-word lines)."""
    return max(_longest_word(text), min(_line_width(text), _PROSE_LINE))


def _longest_word(text: str) -> int:
    return max((cell_len(word) for word in text.split()), default=0)
