"""The machine's state and energy readers against fake /proc, /sys and NVML."""

from __future__ import annotations

import os

import pytest

from whistle_stop.backends.machine.energy import EnergyMeter, NvmlMeter, RaplMeter, wrapped_delta
from whistle_stop.backends.machine.telemetry import (
    MachineProbe,
    load_average,
    mean_clock_mhz,
    read_cpu_times,
)

HZ = os.sysconf("SC_CLK_TCK")


def _proc(
    root, user=100, steal=0, idle=1000, cpuinfo="cpu MHz\t\t: 2000.0\ncpu MHz\t\t: 3000.0\n", load="0.50 0.4 0.3 1/2 3"
):
    root.mkdir(exist_ok=True)
    (root / "stat").write_text(f"cpu  {user} 0 0 {idle} 0 0 0 {steal} 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n")
    (root / "cpuinfo").write_text(cpuinfo)
    (root / "loadavg").write_text(load)
    return root


def test_proc_stat_and_loadavg(tmp_path):
    proc = _proc(tmp_path / "proc", user=200, steal=50, idle=750)
    times = read_cpu_times(proc)
    assert times.busy == pytest.approx(200 / HZ) and times.steal == pytest.approx(50 / HZ)
    assert load_average(proc) == 0.5
    assert read_cpu_times(tmp_path / "none") is None and load_average(tmp_path / "none") is None


def test_clock_from_cpufreq_else_cpuinfo(tmp_path):
    proc = _proc(tmp_path / "proc")
    sys_cpu = tmp_path / "sys"
    assert mean_clock_mhz(sys_cpu, proc) == pytest.approx(2500.0)  # no cpufreq: cpuinfo's lines
    for cpu, khz in (("cpu0", 1_000_000), ("cpu1", 3_000_000)):
        (sys_cpu / cpu / "cpufreq").mkdir(parents=True)
        (sys_cpu / cpu / "cpufreq" / "scaling_cur_freq").write_text(f"{khz}\n")
    assert mean_clock_mhz(sys_cpu, proc) == pytest.approx(2000.0)
    assert mean_clock_mhz(tmp_path / "no", tmp_path / "no") is None


def test_steal_and_outside_load_are_flagged(tmp_path):
    proc = _proc(tmp_path / "proc", user=100, steal=0, idle=1000)
    probe = MachineProbe(proc, tmp_path / "sys")
    before = probe.snapshot(own_cpu_s=0.0)
    # 100 ticks pass: 40 busy (10 of them the run's own), 10 steal, 50 idle
    _proc(proc, user=140, steal=10, idle=1050)
    state = probe.state(before, probe.snapshot(own_cpu_s=10 / HZ))
    assert state.steal_pct == pytest.approx(10.0)
    assert state.outside_cpu_pct == pytest.approx(30.0)
    assert state.clock_mhz == pytest.approx(2500.0) and state.load_avg_1m == 0.5
    assert "steal 10.0% > 5%" in state.flag and "outside load 30.0% > 10%" in state.flag


def test_a_quiet_machine_is_not_flagged(tmp_path):
    proc = _proc(tmp_path / "proc")
    probe = MachineProbe(proc, tmp_path / "sys")
    before = probe.snapshot(0.0)
    _proc(proc, user=150, idle=1050)
    assert probe.state(before, probe.snapshot(50 / HZ)).flag == ""


def _zone(root, name, uj, max_uj=1_000_000):
    zone = root / name
    zone.mkdir(parents=True, exist_ok=True)
    (zone / "energy_uj").write_text(f"{uj}\n")
    (zone / "max_energy_range_uj").write_text(f"{max_uj}\n")


def test_rapl_packages_with_wrap_around(tmp_path):
    root = tmp_path / "powercap"
    _zone(root, "intel-rapl:0", 999_000)
    _zone(root, "intel-rapl:0:0", 5)  # a sub-zone (core): inside the package's figure
    _zone(root, "intel-rapl:1", 100)
    meter = EnergyMeter(RaplMeter(root))
    meter.start()
    _zone(root, "intel-rapl:0", 1_000)  # wrapped: 1 000 000 - 999 000 + 1 000 = 2 000 uJ
    _zone(root, "intel-rapl:1", 3_100)  # 3 000 uJ
    energy = meter.stop()
    assert energy.source == "rapl" and energy.joules == pytest.approx(0.005)
    assert energy.per_token(5) == pytest.approx(0.001)
    assert wrapped_delta(10, 20, 100) == 10 and wrapped_delta(90, 5, 100) == 15


def test_no_powercap_says_why(tmp_path):
    energy = EnergyMeter(RaplMeter(tmp_path / "absent")).stop()
    assert energy.joules is None and energy.source == "" and "no " in energy.absent
    assert energy.per_token(10) is None


class FakeNvml:
    def __init__(self, readings):
        self.readings = list(readings)

    def nvmlInit(self):
        pass

    def nvmlDeviceGetCount(self):
        return 1

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        return self.readings[0] if len(self.readings) == 1 else self.readings.pop(0)


def test_nvml_energy_in_millijoules():
    meter = EnergyMeter(NvmlMeter(FakeNvml([1_000, 1_000, 4_500])))  # the check at open, then start, stop
    meter.start()
    energy = meter.stop()
    assert energy.source == "nvml" and energy.joules == pytest.approx(3.5)


def test_nvml_without_a_driver_says_why():
    class Broken(FakeNvml):
        def nvmlInit(self):
            raise RuntimeError("NVML Shared Library Not Found")

    energy = EnergyMeter(NvmlMeter(Broken([0]))).stop()
    assert energy.joules is None and "NVML Shared Library Not Found" in energy.absent


def test_a_flagged_run_is_a_caveat_of_the_verdict_and_its_readings_are_recorded():
    from tests.run_records import run_record
    from whistle_stop.backends.machine.energy import Energy
    from whistle_stop.backends.machine.telemetry import MachineState
    from whistle_stop.backends.results.verdict import CaveatKind, verdict
    from whistle_stop.backends.runs.recording import note_machine

    runs = [run_record(name, r) for r in range(1, 4) for name in ("hf", "numpy")]
    note_machine(runs[2], MachineState(9.0, 2400.0, 1.0, 0.7), Energy(None, "", "no powercap"))
    assert runs[2].machine_flag == "steal 9.0% > 5%" and runs[2].clock_mhz == 2400.0
    assert runs[2].energy_j is None and runs[2].energy_absent == "no powercap"
    caveat = verdict(runs, reference="hf").caveat(CaveatKind.BUSY_MACHINE)
    assert caveat is not None and "hf/r2 (steal 9.0% > 5%)" in caveat.text
    assert verdict(runs[:2] + runs[3:], reference="hf").caveat(CaveatKind.BUSY_MACHINE) is None
