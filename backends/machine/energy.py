"""Energy a run used, where the machine can measure it: RAPL's counters through
/sys/class/powercap (Intel, and AMD where the kernel exposes them) for the CPU package, NVML's
total-energy counter (`nvidia-ml-py`, optional) for a CUDA engine's GPU.

Never estimated: a run gets joules only from a counter read before and after it; otherwise its
record says why there are none (no powercap here, the counters unreadable without root, no NVML).
RAPL's energy_uj wraps at max_energy_range_uj; a reading that went backwards has wrapped once
(a run is far shorter than a wrap, which takes minutes at the least).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

POWERCAP = Path("/sys/class/powercap")


@dataclass(frozen=True)
class Energy:
    """Joules of one run, or None with the reason."""

    joules: float | None
    source: str  # "rapl" or "nvml" when measured, "" when not
    absent: str = ""  # why there are no joules

    def per_token(self, tokens: int) -> float | None:
        return self.joules / tokens if self.joules is not None and tokens > 0 else None


def wrapped_delta(before: int, after: int, max_range: int) -> int:
    """after - before of a counter that restarts from 0 past `max_range`."""
    return after - before if after >= before else after + max_range - before


@dataclass(frozen=True)
class _Zone:
    energy: Path
    max_range: int


class RaplMeter:
    """The package zones' counters (intel-rapl:N or amd-rapl... at the top level: their sub-zones
    (core, uncore, dram) are parts of the package's figure and are left out not to count twice)."""

    def __init__(self, root: Path = POWERCAP) -> None:
        self.zones: list[_Zone] = []
        self.absent = ""
        if not root.is_dir():
            self.absent = f"no {root} (this machine or VM exposes no RAPL counters)"
            return
        for zone in sorted(root.glob("*-rapl:*")):
            if zone.name.count(":") != 1:
                continue  # a sub-zone: part of its package's
            try:
                max_range = int((zone / "max_energy_range_uj").read_text().strip())
                (zone / "energy_uj").read_text()
            except PermissionError:
                self.absent = f"{zone / 'energy_uj'} is readable only by root"
                continue
            except (OSError, ValueError):
                continue
            self.zones.append(_Zone(zone / "energy_uj", max_range))
        if not self.zones and not self.absent:
            self.absent = f"{root} has no RAPL package zones"

    def read(self) -> list[int] | None:
        try:
            return [int(z.energy.read_text().strip()) for z in self.zones]
        except (OSError, ValueError):
            return None

    def joules(self, before: list[int] | None, after: list[int] | None) -> Energy:
        if not self.zones:
            return Energy(None, "", self.absent)
        if before is None or after is None or len(before) != len(after):
            return Energy(None, "", "a RAPL counter could not be read")
        uj = sum(wrapped_delta(b, a, z.max_range) for b, a, z in zip(before, after, self.zones, strict=True))
        return Energy(uj / 1e6, "rapl")


class NvmlMeter:
    """The GPUs' total-energy counters (mJ since the driver loaded; 64 bits: no wrap)."""

    def __init__(self, nvml: Any = None) -> None:
        self.absent = ""
        self.handles: list[Any] = []
        self.nvml = nvml
        if self.nvml is None:
            try:
                import pynvml  # nvidia-ml-py

                self.nvml = pynvml
            except ImportError:
                self.absent = "nvidia-ml-py is not installed"
                return
        try:
            self.nvml.nvmlInit()
            count = self.nvml.nvmlDeviceGetCount()
            self.handles = [self.nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
            for handle in self.handles:
                self.nvml.nvmlDeviceGetTotalEnergyConsumption(handle)
        except Exception as exc:  # NVMLError: no driver, no GPU, a GPU without the counter
            self.handles, self.absent = [], f"NVML gives no energy counter: {exc}"
            return
        if not self.handles:
            self.absent = "NVML sees no GPU"

    def read(self) -> list[int] | None:
        try:
            return [int(self.nvml.nvmlDeviceGetTotalEnergyConsumption(h)) for h in self.handles]
        except Exception:
            return None

    def joules(self, before: list[int] | None, after: list[int] | None) -> Energy:
        if not self.handles:
            return Energy(None, "", self.absent)
        if before is None or after is None or len(before) != len(after):
            return Energy(None, "", "an NVML counter could not be read")
        return Energy(sum(a - b for b, a in zip(before, after, strict=True)) / 1e3, "nvml")


class EnergyMeter:
    """One run's reading of a meter (RAPL for a CPU engine, NVML for a CUDA one): `start()` then `stop()`."""

    def __init__(self, meter: RaplMeter | NvmlMeter) -> None:
        self.meter = meter
        self._before: list[int] | None = None

    def start(self) -> None:
        self._before = self.meter.read()

    def stop(self) -> Energy:
        return self.meter.joules(self._before, self.meter.read())
