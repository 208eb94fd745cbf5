"""A comparison (comparison.py) as rows, lines and Markdown: what `compare` prints, the HTML
report's section and the window's dialog show, from one place."""

from __future__ import annotations

from .comparison import Comparison, Normalised, share_ratio

HEADERS = ("engine", "metric", "BASE median", "NEW median", "NEW/BASE (interval) @level", "verdict")
SHARE_HEADERS = ("engine", "decode: share of floor BASE", "NEW", "NEW/BASE", "prefill: share of roofline BASE", "NEW")


def _num(value: float | None, digits: int = 3) -> str:
    return "" if value is None else f"{value:.{digits}g}"


def rows(c: Comparison) -> list[list[str]]:
    return [
        [r.engine, f"{r.label} ({r.unit})", _num(r.base_median), _num(r.new_median), r.ratio_text(), r.verdict]
        for r in c.rows
    ]


def share_rows(c: Comparison) -> list[list[str]]:
    def pct(v: float | None) -> str:
        return "" if v is None else f"{v:.0%}"

    out = []
    for n in c.normalised:
        ratio = share_ratio(n.base_floor_share, n.new_floor_share)
        out.append(
            [
                n.engine,
                pct(n.base_floor_share),
                pct(n.new_floor_share),
                "" if ratio is None else f"{ratio:.3f}x",
                pct(n.base_roofline_share),
                pct(n.new_roofline_share),
            ]
        )
    return out


def has_shares(n: Normalised) -> bool:
    return any(
        v is not None for v in (n.base_floor_share, n.new_floor_share, n.base_roofline_share, n.new_roofline_share)
    )


def heading(c: Comparison) -> str:
    base = ", ".join(str(f) for f in c.base.folders)
    new = ", ".join(str(f) for f in c.new.folders)
    return f"NEW ({new}) against BASE ({base})"


def note_lines(c: Comparison) -> list[str]:
    """The method, the environment's differences and the caveats, one line each."""
    out = [
        "ratio: NEW/BASE of the runs' values (Hodges-Lehmann on log values), interval: Mann-Whitney (Moses), "
        f"distribution-free, at the level shown (aimed at {c.confidence:.0%}); a verdict needs the whole interval "
        f"beyond {c.min_effect_pct:g}% of 1 (--min-effect), 'same within' the whole interval inside it"
    ]
    if c.environment_differences:
        out.append("environment differences (BASE folders, then NEW):")
        out += [f"  {key}: {' | '.join(values)}" for key, values in c.environment_differences]
    missing = [n for n in c.normalised if not has_shares(n)]
    if missing and missing[0].absent:
        out.append(f"no shares of the machine's limits: {missing[0].absent}")
    out += [f"caveat: {text}" for text in c.caveats]
    return out


def markdown(c: Comparison) -> str:
    def table(headers: tuple[str, ...], body: list[list[str]]) -> list[str]:
        lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
        return lines + ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in body]

    out = [f"## Comparison: {heading(c)}", "", *table(HEADERS, rows(c)), ""]
    if any(has_shares(n) for n in c.normalised):
        out += ["Each engine against its own machine's limits:", "", *table(SHARE_HEADERS, share_rows(c)), ""]
    out += [f"- {line.strip()}" for line in note_lines(c)]
    return "\n".join(out) + "\n"
