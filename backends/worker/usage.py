"""What a worker uses: its peak memory and CPU time, its own and its descendants'.

A worker's descendants are part of its engine: a managed server (vLLM: a guard, an API server,
an engine core) runs the model in them, so counting only the worker's own process would report a
few tens of MB and ~0.5 CPU ms per token for an engine that uses gigabytes and two cores.
"""

from __future__ import annotations

import os
import sys
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import psutil

# --- the worker's own memory and CPU ------------------------------------------------------------
# `ru_maxrss` is no good on Linux: the kernel carries a process's high-water mark across fork +
# exec, so a spawned worker reports at least its parent's peak (after the window touched 600 MB,
# a ~70 MB engine read 640 MB). VmHWM belongs to the process's own address space, which exec
# replaces, and Linux can reset it (clear_refs), so load and serving get a peak each.


def _has_children_linux() -> bool | None:
    """Whether any thread of this process has started a child (/proc/self/task/*/children); None
    where the kernel does not say (built without CONFIG_PROC_CHILDREN)."""
    try:
        threads = os.listdir("/proc/self/task")
    except OSError:
        return None
    for tid in threads:
        try:
            with open(f"/proc/self/task/{tid}/children", encoding="ascii") as children:
                if children.read().strip():
                    return True
        except FileNotFoundError:
            if os.path.isdir(f"/proc/self/task/{tid}"):
                return None  # the file is missing, not the thread
        except OSError:
            continue  # the thread has ended
    return False


def _descendants() -> list[psutil.Process]:
    # Importing psutil is a cost every worker paid before Ready; most have no children.
    if sys.platform.startswith("linux") and _has_children_linux() is False:
        return []
    import psutil

    try:
        return psutil.Process().children(recursive=True)
    except psutil.Error:
        return []


def _vm_hwm_kb(pid: str | int) -> int:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def peak_rss_mb() -> float:
    """This process's peak resident set size, MB, plus each live descendant's own peak (a sum of
    peaks: an upper bound when they peaked at different moments). What the OS accounted, not a sample.

    Linux: VmHWM of /proc/self/status (since exec, or since the last `reset_peak_rss`).
    Windows: the peak working set (psutil). macOS: `ru_maxrss` (bytes there), which the OS does not
    let us reset; it is the process's own since exec as far as macOS accounts it.
    """
    if sys.platform.startswith("linux"):
        own = _vm_hwm_kb("self")
        if own:
            return (own + sum(_vm_hwm_kb(child.pid) for child in _descendants())) / 1024  # kB
    try:
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak / 1024 if sys.platform != "darwin" else peak / 2**20
    except ImportError:  # Windows
        import psutil

        info = psutil.Process().memory_info()
        return getattr(info, "peak_wset", info.rss) / 2**20


def reset_peak_rss() -> bool:
    """Start a new high-water mark at the current RSS (Linux >= 4.0); False where the OS cannot."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as clear_refs:
            clear_refs.write("5")
    except OSError:
        return False
    for child in _descendants():  # a server's processes: their serving peak, not their load's
        try:
            with open(f"/proc/{child.pid}/clear_refs", "w", encoding="ascii") as clear_refs:
                clear_refs.write("5")
        except OSError:
            pass
    return True


def cpu_seconds() -> float:
    """User + system CPU seconds of this process so far (all its threads), plus its descendants':
    the live ones' and those that have exited, so a helper that ends mid-run still counts.

    `process_time` reads CLOCK_PROCESS_CPUTIME_ID on Linux and macOS (nanoseconds) and
    GetProcessTimes on Windows; os.times() would count in 10 ms clock ticks on Linux. The children
    this process has reaped are in RUSAGE_CHILDREN (with those they reaped in turn); each live
    descendant brings its own and its reaped children's (`process_cpu_s`).
    """
    total = time.process_time() + _reaped_children_s()
    children = _descendants()
    if children:
        import psutil

        for child in children:
            try:
                total += process_cpu_s(child)
            except psutil.Error:
                continue
    return total


def _reaped_children_s() -> float:
    try:
        import resource
    except ImportError:  # Windows: no exited children are accounted
        return 0.0
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def process_cpu_s(process: psutil.Process) -> float:
    """User + system CPU seconds of another process (all its threads, ended ones included) plus its
    reaped children's. Its own come from its CPU clock where the OS has one (Linux: nanoseconds),
    else psutil's cpu_times, which Linux counts in 10 ms ticks; the reaped children's come in ticks."""
    times = process.cpu_times()
    own = _cpu_clock_s(process.pid)
    return (times.user + times.system if own is None else own) + times.children_user + times.children_system


def _cpu_clock_s(pid: int) -> float | None:
    """Linux: the process's CPU clock (all its threads), read by the clock id glibc's
    clock_getcpuclockid makes (MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED)); None elsewhere or once
    the process has been reaped."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return time.clock_gettime_ns((~pid << 3) | 2) / 1e9
    except OSError:
        return None
