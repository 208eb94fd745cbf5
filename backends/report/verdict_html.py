"""The verdict's lines as HTML, for the report and the window's Summary alike (Qt-free)."""

from __future__ import annotations

import html

from ..results.verdict import Verdict


def verdict_html(result: Verdict) -> str:
    """The verdict's lines as HTML: the headline, the findings (with each pick's cost nested) and the caveats."""
    lines = result.lines()
    parts = [f"<p>{html.escape(lines[0], quote=False)}</p><ul>"]
    open_item = False
    for line in lines[1:]:
        if line == "Caveats:":
            parts.append(("</li>" if open_item else "") + "</ul><p class=caveats>Caveats:</p><ul class=warn-list>")
            open_item = False
        elif line.startswith("  - "):
            parts.append(f"<ul><li>{html.escape(line[4:], quote=False)}</li></ul>")
        else:
            parts.append(("</li>" if open_item else "") + f"<li>{html.escape(line[2:], quote=False)}")
            open_item = True
    parts.append(("</li>" if open_item else "") + "</ul>")
    return "".join(parts)
