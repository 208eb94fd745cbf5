"""The README stays short and whole: at most 250 lines, none over 160 characters, and every
relative link and image points at a file (and an anchor, where it names one) that exists."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def _anchors(markdown: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces as hyphens."""
    out = set()
    for heading in re.findall(r"^#+\s+(.*)$", markdown, re.M):
        text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
        out.add(text.replace(" ", "-"))
    return out


def test_readme_is_short_and_its_lines_fit():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 250
    long = [(n, len(line)) for n, line in enumerate(lines, start=1) if len(line) > 160]
    assert not long, long


def test_every_relative_link_and_image_resolves():
    text = README.read_text(encoding="utf-8")
    targets = [t for t in LINK.findall(text) if not re.match(r"^[a-z]+:", t)]
    assert any(t.endswith(".png") for t in targets)
    for target in targets:
        path, _, anchor = target.partition("#")
        file = (README.parent / path) if path else README
        assert file.exists(), target
        if anchor and file.suffix == ".md":
            assert anchor in _anchors(file.read_text(encoding="utf-8")), target


def test_the_results_table_is_generated_from_its_measurement_file():
    """The README's results are rows of a dated file in docs/measurements/ (itself made by
    `report --markdown`), written by `python -m scripts.readme_results`: an edit by hand fails here."""
    from scripts.readme_results import current_block, results_block

    block, measurement, backends = current_block(README.read_text(encoding="utf-8"))
    assert measurement.is_file() and measurement.parent.name == "measurements" and backends
    assert block == results_block(measurement, backends)
