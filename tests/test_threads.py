"""Default threads: usable physical cores, affinity and cgroup aware (fake sysfs and cgroup folders)."""

from __future__ import annotations

import math
from pathlib import Path

from whistle_stop.backends.machine.threads import (
    cgroup_quota,
    default_threads,
    physical_cores,
    resolve_threads,
    usable_cpus,
)


def _sysfs(root: Path, topology: dict[int, tuple[int, int]]) -> Path:
    """cpuN -> (physical_package_id, core_id)."""
    for cpu, (package, core) in topology.items():
        folder = root / f"cpu{cpu}" / "topology"
        folder.mkdir(parents=True)
        (folder / "core_id").write_text(f"{core}\n")
        (folder / "physical_package_id").write_text(f"{package}\n")
    return root


def _cgroup(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


SMT_4C8T = {0: (0, 0), 1: (0, 1), 2: (0, 2), 3: (0, 3), 4: (0, 0), 5: (0, 1), 6: (0, 2), 7: (0, 3)}


def test_smt_siblings_count_once(tmp_path):
    sysfs = _sysfs(tmp_path / "cpu", SMT_4C8T)
    assert physical_cores(list(range(8)), sysfs) == (4, "sysfs")
    resolved = resolve_threads(list(range(8)), sysfs, _cgroup(tmp_path / "cg", {}))
    assert resolved.threads == 4 and resolved.cgroup_quota_cpus is None
    assert "4 physical core(s) (sysfs) of 8 usable CPU(s)" in resolved.how


def test_affinity_mask_limits_the_cores(tmp_path):
    sysfs = _sysfs(tmp_path / "cpu", SMT_4C8T)
    assert resolve_threads([0, 4], sysfs, tmp_path / "none").threads == 1  # two siblings of one core
    assert resolve_threads([0, 1, 5], sysfs, tmp_path / "none").threads == 2


def test_cores_on_two_packages_are_distinct(tmp_path):
    sysfs = _sysfs(tmp_path / "cpu", {0: (0, 0), 1: (1, 0)})
    assert physical_cores([0, 1], sysfs) == (2, "sysfs")


def test_cgroup_v2_quota_caps_rounded_up(tmp_path):
    sysfs = _sysfs(tmp_path / "cpu", SMT_4C8T)
    cgroup = _cgroup(tmp_path / "cg", {"cpu.max": "150000 100000\n"})
    assert cgroup_quota(cgroup) == (1.5, str(cgroup / "cpu.max"))
    resolved = resolve_threads(list(range(8)), sysfs, cgroup)
    assert resolved.threads == 2 and resolved.as_dict()["cgroup_quota_cpus"] == 1.5
    unlimited = _cgroup(tmp_path / "cg2", {"cpu.max": "max 100000\n"})
    assert resolve_threads(list(range(8)), sysfs, unlimited).threads == 4


def test_cgroup_v1_quota_and_at_least_one(tmp_path):
    sysfs = _sysfs(tmp_path / "cpu", SMT_4C8T)
    v1 = _cgroup(tmp_path / "cg", {"cpu/cpu.cfs_quota_us": "300000\n", "cpu/cpu.cfs_period_us": "100000\n"})
    assert resolve_threads(list(range(8)), sysfs, v1).threads == 3
    tiny = _cgroup(tmp_path / "cg1", {"cpu/cpu.cfs_quota_us": "10000\n", "cpu/cpu.cfs_period_us": "100000\n"})
    assert resolve_threads(list(range(8)), sysfs, tiny).threads == 1
    no_quota = _cgroup(tmp_path / "cg3", {"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"})
    assert resolve_threads(list(range(8)), sysfs, no_quota).threads == 4


def test_without_sysfs_psutil_gives_the_smt_ratio(tmp_path, monkeypatch):
    import psutil

    monkeypatch.setattr(psutil, "cpu_count", lambda logical=True: 8 if logical else 4)  # 2 threads per core
    missing = tmp_path / "missing"
    assert physical_cores([0, 1, 2, 3], missing) == (2, "psutil")
    assert physical_cores(list(range(8)), missing) == (4, "psutil")
    assert physical_cores([3], missing) == (1, "psutil")  # half a core's siblings is still a core


def test_without_sysfs_or_psutil_every_usable_cpu_counts(tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "psutil", None)  # `import psutil` raises ImportError
    assert physical_cores([0, 1, 2], tmp_path / "missing") == (3, "logical")


def test_this_machine_resolves_to_its_usable_physical_cores_under_its_quota():
    resolved = resolve_threads()
    assert default_threads() == resolved.threads
    assert resolved.usable_cpus == len(usable_cpus()) and 1 <= resolved.physical_cores <= resolved.usable_cpus
    quota = resolved.cgroup_quota_cpus
    expected = resolved.physical_cores if quota is None else min(resolved.physical_cores, math.ceil(quota))
    assert resolved.threads == max(1, expected) and resolved.how.startswith(f"{resolved.threads}: ")


def test_environment_records_how_threads_were_resolved(tiny_model, tmp_path):
    from tests import fake_engines
    from whistle_stop.backends import registry
    from whistle_stop.backends.runs.bench import BenchConfig, BenchSession

    config = BenchConfig(model="random:tiny", backends=("a",), new_tokens=2, repeats=1, warmup=0)
    with registry.use([fake_engines.spec("a")]):
        result = BenchSession(config).run()
    resolution = result.environment["threads_resolution"]
    assert resolution["source"] == "usable physical cores" and resolution["threads"] >= 1
    config = BenchConfig(model="random:tiny", backends=("a",), new_tokens=2, repeats=1, warmup=0, threads=1)
    with registry.use([fake_engines.spec("a")]):
        result = BenchSession(config).run()
    assert result.environment["threads_resolution"] == {"source": "--threads", "threads": 1}


def test_the_default_is_described_as_what_it_does_everywhere_it_is_shown():
    """--threads 0 is the usable physical cores under the cgroup quota, not "all cores": the CLI's
    help, the README and the window's tooltip say so, and none says otherwise."""
    import re

    from whistle_stop.backends.cli.parser import build_parser

    root = Path(__file__).resolve().parent.parent
    bench = build_parser()._subparsers._group_actions[0].choices["bench"]
    help_text = " ".join(a.help or "" for a in bench._actions if "--threads" in a.option_strings)
    shown = {
        "bench --help": help_text,
        "README.md": (root / "README.md").read_text(encoding="utf-8"),
        "gui/setup_panel.py": (root / "gui" / "setup_panel.py").read_text(encoding="utf-8"),
    }
    for where, text in shown.items():
        flat = " ".join(text.split())
        assert "usable physical cores" in flat, where
        assert not re.search(r"\b(all|every) (the )?cores?\b", flat, re.I), where


def test_only_a_team_that_takes_every_usable_cpu_is_bound(monkeypatch):
    from whistle_stop.backends.machine import threads

    monkeypatch.setattr(threads, "process_cpus", lambda: (2, 3, 5))
    assert threads.cpus_to_bind(3) == [2, 3, 5]  # thread i on the i-th usable CPU
    assert threads.cpus_to_bind(2) == []  # a smaller team: the scheduler has an idle CPU for it
    assert threads.cpus_to_bind(4) == []
    monkeypatch.setattr(threads, "process_cpus", lambda: (0,))
    assert threads.cpus_to_bind(1) == []  # one thread: nothing to bind
