"""Engine colours, Qt-free: one list per background, assigned to a run's engines in order.

Sixteen colours, each with a WCAG contrast ratio of at least 3 against its background (an
engine's name in its colour stays legible): on white, mid-dark colours; on the dark theme, the
same hues lighter. The first eight are the most distinct hues at one lightness; the next eight
are other hues at another lightness, so two engines of one run never share a colour up to
sixteen. Colours go by an engine's place in the run, never by its name: a hash of names put two
engines of one run in one colour.

Categories (a profile's kinds of work, a start's parts, precisions) go by their key instead, so
'attention' has one colour in every figure of every run whatever else is shown: a fixed place in
the palette for the known ones (keys shown in one figure never share one), a stable hash for others.
"""

from __future__ import annotations

import zlib

from ..profilers.categories import Category

# On white (the light theme, reports and PNGs).
LIGHT = (
    "#358be2",
    "#d96806",
    "#279d31",
    "#e75959",
    "#a971d0",
    "#119898",
    "#e1559b",
    "#a18708",
    "#4444d0",
    "#924025",
    "#12663c",
    "#8f308f",
    "#07607e",
    "#735314",
    "#3d6219",
    "#a5293e",
)
# On the dark theme's plots and panes (#1e1f22, #232428).
DARK = (
    "#3c90e3",
    "#df6b06",
    "#28a132",
    "#e85f5f",
    "#ab76d1",
    "#119c9c",
    "#e25b9f",
    "#a58b09",
    "#b0b0eb",
    "#e4a691",
    "#24ce79",
    "#df9fdf",
    "#2ec3f4",
    "#dfad48",
    "#7dc832",
    "#e8a2ad",
)
MIN_CONTRAST = 3.0


def engine_colour(index: int, dark: bool = False) -> str:
    """The colour of the run's index-th engine (from the start again after sixteen)."""
    palette = DARK if dark else LIGHT
    return palette[index % len(palette)]


# A known category's place in the palettes. A profile's categories, a start's parts and the
# precisions are each drawn together, so each set has colours of its own; the sets never share a figure.
CATEGORY_PLACES: dict[str, int] = {
    Category.MATMUL.value: 0,
    Category.ATTENTION.value: 1,
    Category.KV_CACHE.value: 2,
    Category.NORM_ACTIVATION.value: 3,
    Category.OTHER_KERNELS.value: 4,
    Category.ENGINE_UNSPLIT.value: 5,
    Category.FRAMEWORK.value: 8,  # not 6: pink beside norm + activation's red, often stacked on it
    Category.HARNESS.value: 7,
    Category.UNATTRIBUTED.value: 6,
    "cold start": 12,
    "one-time build": 9,
    "fp32": 0,
    "bf16": 1,
    "f16": 13,
    "fp16": 13,
    "int8": 2,
    "int4": 4,
}


def category_colour(key: str, dark: bool = False) -> str:
    """A category's colour, a function of its key alone: its fixed place, else a stable hash
    (crc32, the same in every process, unlike Python's salted hash())."""
    palette = DARK if dark else LIGHT
    place = CATEGORY_PLACES.get(key)
    if place is None:
        place = zlib.crc32(key.encode("utf-8"))
    return palette[place % len(palette)]


def run_colours(names: list[str], dark: bool = False) -> dict[str, str]:
    """{engine: colour} for one run's engines, in the run's order."""
    return {name: engine_colour(i, dark) for i, name in enumerate(dict.fromkeys(names))}


def rgb(hex_colour: str) -> tuple[int, int, int]:
    value = hex_colour.lstrip("#")
    return int(value[0:2], 16), int(value[2:4], 16), int(value[4:6], 16)


def relative_luminance(hex_colour: str) -> float:
    """WCAG 2's relative luminance of an sRGB colour."""

    def linear(channel: int) -> float:
        c = channel / 255
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (linear(c) for c in rgb(hex_colour))
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast_ratio(a: str, b: str) -> float:
    """WCAG 2's contrast ratio, 1 to 21 (3 is the minimum for large text and graphics)."""
    high, low = sorted((relative_luminance(a), relative_luminance(b)), reverse=True)
    return (high + 0.05) / (low + 0.05)
