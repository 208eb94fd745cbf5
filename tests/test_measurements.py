"""Every dated page in docs/measurements/ is its committed records regenerated: a figure typed or
edited by hand, or records changed without the page, fails here."""

from pathlib import Path

import pytest

from whistle_stop.backends.report.folder_data import load_folder
from whistle_stop.backends.report.markdown import measurement_markdown

ROOT = Path(__file__).resolve().parent.parent
MEASUREMENTS = ROOT / "docs" / "measurements"
PAGES = sorted(page for page in MEASUREMENTS.glob("*.md") if (MEASUREMENTS / "data" / page.stem).is_dir())


def test_there_are_dated_pages_with_records():
    assert PAGES, "docs/measurements/ has no page generated from committed records"


@pytest.mark.parametrize("page", PAGES, ids=[page.stem for page in PAGES])
def test_each_dated_page_is_its_records_regenerated(page):
    source = f"docs/measurements/data/{page.stem}"
    assert page.read_text(encoding="utf-8") == measurement_markdown(load_folder(ROOT / source), source)
