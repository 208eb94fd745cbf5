"""How many threads an engine gets by default: the physical cores this process may really use.

`os.cpu_count()` counts SMT siblings and ignores both the CPU affinity mask and a container's CPU
quota, so on a hyperthreaded laptop, a `taskset` shell or a limited container it oversubscribes.
Here: the CPUs of `os.sched_getaffinity(0)` (where the OS has it), one per physical core
(sysfs topology: core_id + physical_package_id; psutil's physical count as a fallback), capped by
the cgroup CPU quota (v2 `cpu.max`, v1 `cpu.cfs_quota_us` / `cpu.cfs_period_us`, rounded up);
at least 1. `resolve_threads()` also says how it got there (environment.json records it).
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path

SYSFS_CPU = Path("/sys/devices/system/cpu")
CGROUP_ROOT = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class ThreadsResolution:
    threads: int
    logical_cpus: int | None  # os.cpu_count()
    usable_cpus: int  # in the affinity mask
    physical_cores: int  # among the usable CPUs
    physical_source: str  # "sysfs", "psutil" or "logical" (nothing better known)
    cgroup_quota_cpus: float | None  # None: no quota found
    cgroup_source: str  # the file the quota came from, or ""

    @property
    def how(self) -> str:
        text = f"{self.physical_cores} physical core(s) ({self.physical_source}) of {self.usable_cpus} usable CPU(s)"
        if self.cgroup_quota_cpus is not None:
            text += f", cgroup quota {self.cgroup_quota_cpus:g} CPU(s) ({self.cgroup_source})"
        return f"{self.threads}: {text}"

    def as_dict(self) -> dict:
        return {**asdict(self), "how": self.how}


def usable_cpus() -> list[int]:
    """The CPUs this process may run on (the affinity mask; every CPU where the OS has none)."""
    if hasattr(os, "sched_getaffinity"):
        try:
            return sorted(os.sched_getaffinity(0))
        except OSError:
            pass
    return list(range(os.cpu_count() or 1))


def physical_cores(cpus: list[int], sysfs: Path = SYSFS_CPU) -> tuple[int, str]:
    """How many distinct physical cores `cpus` span, and where that came from."""
    cores = set()
    for cpu in cpus:
        topology = sysfs / f"cpu{cpu}" / "topology"
        try:
            core = (topology / "core_id").read_text().strip()
            package = (topology / "physical_package_id").read_text().strip()
        except OSError:
            break
        cores.add((package, core))
    else:
        if cores:
            return len(cores), "sysfs"
    try:
        import psutil

        physical, logical = psutil.cpu_count(logical=False), psutil.cpu_count(logical=True)
    except ImportError:
        physical = logical = None
    if physical and logical:
        # SMT ratio of the machine applied to the usable CPUs (the affinity mask may be a subset).
        return max(1, min(len(cpus), round(len(cpus) * physical / logical))), "psutil"
    return max(1, len(cpus)), "logical"


def cgroup_quota(root: Path = CGROUP_ROOT) -> tuple[float | None, str]:
    """The CPU quota in CPUs (quota / period) of this process's cgroup, or None when unlimited."""
    for folder in _cgroup_folders(root):
        path = folder / "cpu.max"  # v2: "max 100000" or "200000 100000"
        try:
            fields = path.read_text().split()
        except OSError:
            continue
        if len(fields) >= 2 and fields[0] != "max":
            try:
                quota, period = int(fields[0]), int(fields[1])
            except ValueError:
                continue
            if quota > 0 and period > 0:
                return quota / period, str(path)
    for folder in (root / "cpu", root / "cpu,cpuacct", root):  # v1
        try:
            quota = int((folder / "cpu.cfs_quota_us").read_text().strip())
            period = int((folder / "cpu.cfs_period_us").read_text().strip())
        except (OSError, ValueError):
            continue
        if quota > 0 and period > 0:
            return quota / period, str(folder / "cpu.cfs_quota_us")
    return None, ""


def _cgroup_folders(root: Path) -> list[Path]:
    """This process's own v2 cgroup folder (from /proc/self/cgroup) when it lies under `root`, then `root`."""
    folders = []
    if root == CGROUP_ROOT:
        try:
            for line in Path("/proc/self/cgroup").read_text().splitlines():
                if line.startswith("0::"):
                    relative = line[3:].strip().lstrip("/")
                    if relative:
                        folders.append(root / relative)
        except OSError:
            pass
    folders.append(root)
    return folders


def resolve_threads(
    cpus: list[int] | None = None, sysfs: Path = SYSFS_CPU, cgroup_root: Path = CGROUP_ROOT
) -> ThreadsResolution:
    cpus = usable_cpus() if cpus is None else list(cpus)
    cores, source = physical_cores(cpus, sysfs)
    quota, quota_source = cgroup_quota(cgroup_root)
    threads = cores if quota is None else min(cores, math.ceil(quota - 1e-9))
    return ThreadsResolution(max(1, threads), os.cpu_count(), len(cpus), cores, source, quota, quota_source)


def default_threads() -> int:
    """Threads per engine when the user asks for none: the usable physical cores (at least 1)."""
    return resolve_threads().threads


def cpus_to_bind(threads: int) -> list[int]:
    """The CPUs to bind a team of `threads` to, thread i on the i-th, or [] to leave it to the OS.

    A team that takes every CPU this process may use is bound: unbound, a pool's thread asleep
    between runs was woken onto its partner's busy CPU every other run and the run's first parallel
    step waited a scheduler tick for it (+10-15 ms on a 2-10 ms prefill, 6 of 40 short runs of the
    native engines and 8 of 32 of ONNX Runtime's on the Zen 5 EPYC; none bound). A smaller team is
    left alone: the scheduler has idle CPUs to place its threads on, and other engines' workers may
    share the machine. Only where the OS has affinity masks (Linux)."""
    if not hasattr(os, "sched_setaffinity"):
        return []
    cpus = list(process_cpus())
    return cpus if threads >= 2 and len(cpus) == threads else []


@cache
def process_cpus() -> tuple[int, ...]:
    """usable_cpus as this process first saw them: binding a team narrows the calling thread's mask,
    and the rule is asked again after it (an engine's notes, a second session)."""
    return tuple(usable_cpus())
