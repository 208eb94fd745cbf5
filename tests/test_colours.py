"""Engine colours: distinct within a run of up to sixteen engines, legible on both themes."""

import itertools
import math

import pytest

from whistle_stop.backends import registry
from whistle_stop.backends.report import colours


def _lab(hex_colour):
    """CIE L*a*b* (D65) of an sRGB colour, for a perceptual distance."""

    def linear(c):
        c /= 255
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (linear(c) for c in colours.rgb(hex_colour))
    x = (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047
    y = 0.2126 * r + 0.7152 * g + 0.0722 * b
    z = (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883
    f = [t ** (1 / 3) if t > 0.008856 else 7.787 * t + 16 / 116 for t in (x, y, z)]
    return 116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])


@pytest.mark.parametrize("dark", [False, True])
def test_no_two_engines_of_a_run_share_a_colour_up_to_sixteen(dark):
    names = registry.names()[:16]
    assigned = colours.run_colours(names, dark)
    assert len(set(assigned.values())) == 16
    # distinct to the eye too: every pair at least 15 apart in CIE L*a*b* (ΔE76)
    closest = min(math.dist(_lab(a), _lab(b)) for a, b in itertools.combinations(assigned.values(), 2))
    assert closest > 15


def test_colours_go_by_the_runs_order_not_by_name():
    """hf and llamacpp-q8_0 once shared a blue in a run of four (colours hashed by registry place)."""
    run = ["hf", "llamacpp-q8_0", "onnx-int8", "native-int4"]
    assigned = colours.run_colours(run)
    assert len(set(assigned.values())) == 4 and assigned["hf"] == colours.LIGHT[0]
    assert colours.run_colours(["native-int4"])["native-int4"] == colours.LIGHT[0]


def test_every_engine_colour_is_legible_on_its_theme():
    from whistle_stop.gui.theme import DARK, LIGHT

    for theme, palette in ((LIGHT, colours.LIGHT), (DARK, colours.DARK)):
        for background in (theme.plot_bg, theme.pane_bg):
            ratios = {c: colours.contrast_ratio(c, background) for c in palette}
            assert min(ratios.values()) >= colours.MIN_CONTRAST, (background, ratios)


def test_contrast_ratio_matches_wcag():
    assert colours.contrast_ratio("#000000", "#ffffff") == pytest.approx(21.0)
    assert colours.contrast_ratio("#ffffff", "#ffffff") == pytest.approx(1.0)
    assert colours.contrast_ratio("#767676", "#ffffff") == pytest.approx(4.54, abs=0.01)


def test_the_window_assigns_colours_by_the_run_and_theme(qapp):
    from whistle_stop.gui.theme import DARK, LIGHT, engine_colours

    run = ["hf", "llamacpp-q8_0", "onnx-int8", "native-int4"]
    light, dark = engine_colours(run, LIGHT), engine_colours(run, DARK)
    assert len({c.name() for c in light.values()}) == 4
    assert [c.name() for c in dark.values()] == list(colours.DARK[:4])
