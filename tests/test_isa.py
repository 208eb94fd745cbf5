"""The instruction-set levels: what a CPU's flags let it execute, the best, and one clear refusal."""

from __future__ import annotations

import pytest

from whistle_stop.backends.kernels import native
from whistle_stop.backends.machine.isa import Isa, IsaUnavailable, best_level, executable_levels, resolve

ZEN3 = "fpu sse2 avx avx2 fma f16c bmi1 bmi2 movbe abm"
ZEN4 = ZEN3 + " avx512f avx512bw avx512vl avx512dq avx512_bf16 avx512_vnni"
SAPPHIRE_RAPIDS = ZEN4 + " amx_tile amx_bf16 amx_int8"


@pytest.mark.parametrize(
    ("flags", "levels"),
    [
        ("fpu sse2", (Isa.C,)),
        (ZEN3, (Isa.AVX2, Isa.C)),
        (ZEN4, (Isa.AVX512, Isa.AVX2, Isa.C)),
        (SAPPHIRE_RAPIDS, (Isa.AMX, Isa.AVX512, Isa.AVX2, Isa.C)),
        (ZEN3.replace(" fma", "") + " avx512f avx512bw avx512vl avx512dq", (Isa.C,)),  # a level needs the ones below
    ],
)
def test_the_levels_a_cpu_executes_follow_its_flags(flags, levels):
    assert executable_levels(flags) == levels
    assert best_level(flags) == levels[0] and resolve(Isa.AUTO, flags) == levels[0]


def test_a_level_the_cpu_lacks_is_refused_in_one_line():
    with pytest.raises(IsaUnavailable, match=r"^the amx instruction-set level cannot run here: this CPU lacks amx"):
        resolve("amx", ZEN4)
    with pytest.raises(IsaUnavailable, match="runs: avx2, c"):
        resolve(Isa.AVX512, ZEN3)
    with pytest.raises(IsaUnavailable, match="no instruction-set level"):
        resolve("avx9", ZEN4)


def test_each_level_builds_its_own_recipe_and_only_amx_links_the_amx_unit():
    here = executable_levels()
    recipes = {level: native.recipe("gpt2_step", level) for level in here}
    assert len({r.text for r in recipes.values()}) == len(here)  # each level its own cache key
    for level, how in recipes.items():
        assert "-march=native" not in how.main_flags or level in (Isa.AMX, Isa.AVX512)
        assert not any(f.startswith("-mamx") for f in how.main_flags)
        assert (how.amx_unit is not None) == (level == Isa.AMX)
    assert "-mno-avx512f" in native.recipe("gemv", Isa.AVX2).main_flags
    assert native.recipe("gemv", Isa.C).main_flags[-2:] == ("-march=x86-64", "-mtune=native")
