"""What the machine was doing during a run: CPU steal, the cores' clock, the CPU that processes
outside the run used, and the load average (Linux's /proc and /sys; absent elsewhere).

A shared VM swings by tens of percent within minutes: a neighbour takes the host's cores (steal),
the host lowers the clock, or another process on this VM competes. Each run's record carries these
readings, and a run where steal or outside load passed its threshold is flagged, so a verdict or a
comparison can name it instead of reading it as the engine's own.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

STEAL_FLAG_PCT = 5.0  # steal above this share of the machine's CPU time flags the run
OUTSIDE_FLAG_PCT = 10.0  # processes outside the run using more than this share of the machine's CPUs flag it


@dataclass(frozen=True)
class CpuTimes:
    """/proc/stat's aggregate `cpu` line, in seconds (USER_HZ ticks / the tick rate)."""

    busy: float  # user + nice + system + irq + softirq
    idle: float  # idle + iowait
    steal: float

    @property
    def total(self) -> float:
        return self.busy + self.idle + self.steal


def _tick_hz() -> float:
    try:
        return float(os.sysconf("SC_CLK_TCK"))
    except (ValueError, OSError, AttributeError):
        return 100.0


def read_cpu_times(proc: Path = Path("/proc")) -> CpuTimes | None:
    """The machine's CPU time so far; None where /proc/stat is missing or unreadable."""
    try:
        with open(proc / "stat", encoding="ascii") as stat:
            for line in stat:
                if line.startswith("cpu "):
                    values = [float(v) for v in line.split()[1:]]
                    break
            else:
                return None
    except (OSError, ValueError):
        return None
    values += [0.0] * (8 - len(values))  # kernels before 2.6.11 have no steal column
    user, nice, system, idle, iowait, irq, softirq, steal = values[:8]
    hz = _tick_hz()
    return CpuTimes((user + nice + system + irq + softirq) / hz, (idle + iowait) / hz, steal / hz)


def mean_clock_mhz(sys_cpu: Path = Path("/sys/devices/system/cpu"), proc: Path = Path("/proc")) -> float | None:
    """The cores' mean current clock: cpufreq's scaling_cur_freq (kHz) where the kernel has it,
    else /proc/cpuinfo's "cpu MHz" lines (a VM often has only these, at the nominal clock); None
    where neither says."""
    khz = []
    for path in sorted(sys_cpu.glob("cpu[0-9]*/cpufreq/scaling_cur_freq")):
        try:
            khz.append(float(path.read_text().strip()))
        except (OSError, ValueError):
            continue
    if khz:
        return sum(khz) / len(khz) / 1000.0
    mhz = []
    try:
        with open(proc / "cpuinfo", encoding="utf-8", errors="replace") as info:
            for line in info:
                if line.lower().startswith("cpu mhz"):
                    try:
                        mhz.append(float(line.split(":", 1)[1]))
                    except (IndexError, ValueError):
                        continue
    except OSError:
        return None
    return sum(mhz) / len(mhz) if mhz else None


def load_average(proc: Path = Path("/proc")) -> float | None:
    """The 1-minute load average (/proc/loadavg's first field); None where it cannot be read."""
    try:
        return float((proc / "loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


@dataclass(frozen=True)
class MachineSnapshot:
    """The counters at one moment, and the run's own CPU seconds then."""

    times: CpuTimes | None
    own_cpu_s: float  # the run's processes: the app and its workers, their descendants included
    clock_mhz: float | None


@dataclass(frozen=True)
class MachineState:
    """What the machine did between two snapshots; None where a reading is missing."""

    steal_pct: float | None  # of the machine's CPU time
    clock_mhz: float | None  # the mean of the two readings
    outside_cpu_pct: float | None  # busy CPU time not the run's, of the machine's CPU time
    load_avg_1m: float | None

    @property
    def flag(self) -> str:
        """'' for a quiet machine, else what passed its threshold ('steal 7.1% > 5%')."""
        out = []
        if self.steal_pct is not None and self.steal_pct > STEAL_FLAG_PCT:
            out.append(f"steal {self.steal_pct:.1f}% > {STEAL_FLAG_PCT:g}%")
        if self.outside_cpu_pct is not None and self.outside_cpu_pct > OUTSIDE_FLAG_PCT:
            out.append(f"outside load {self.outside_cpu_pct:.1f}% > {OUTSIDE_FLAG_PCT:g}%")
        return "; ".join(out)

    def as_dict(self) -> dict:
        return {
            "steal_pct": self.steal_pct,
            "clock_mhz": self.clock_mhz,
            "outside_cpu_pct": self.outside_cpu_pct,
            "load_avg_1m": self.load_avg_1m,
            "flag": self.flag,
        }


class MachineProbe:
    """Reads the counters from `proc` and `sys_cpu` (the real ones unless a test gives fakes)."""

    def __init__(self, proc: Path = Path("/proc"), sys_cpu: Path = Path("/sys/devices/system/cpu")) -> None:
        self.proc, self.sys_cpu = proc, sys_cpu

    def snapshot(self, own_cpu_s: float) -> MachineSnapshot:
        return MachineSnapshot(read_cpu_times(self.proc), own_cpu_s, mean_clock_mhz(self.sys_cpu, self.proc))

    def state(self, before: MachineSnapshot, after: MachineSnapshot) -> MachineState:
        clocks = [c for c in (before.clock_mhz, after.clock_mhz) if c is not None]
        clock = sum(clocks) / len(clocks) if clocks else None
        steal = outside = None
        if before.times is not None and after.times is not None:
            total = after.times.total - before.times.total
            if total > 0:
                steal = 100.0 * max(0.0, after.times.steal - before.times.steal) / total
                busy = after.times.busy - before.times.busy
                own = after.own_cpu_s - before.own_cpu_s
                outside = 100.0 * min(total, max(0.0, busy - own)) / total
        return MachineState(steal, clock, outside, load_average(self.proc))
