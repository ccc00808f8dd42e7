"""A bench task's baselines (the default config and the vendor function on the same shape and
device), measured with the task's configs rather than on their own.

The default config is usually one of the space's configs: then the task's own measurement of it
is the default baseline (same config, shape, inputs, device and engine), and it is not timed a
second time. What is left (the vendor function, a default outside the space) rides along with
the task's last batch of configs, so it costs no pass of its own on the device.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable

from aot_tune.bench.runner import BenchRequest, ConfigMeasurement
from aot_tune.pipeline.plan import BenchUnit
from aot_tune.pipeline.recording import measurement_proto
from aot_tune.space import Config
from aot_tune.tuning_schema import Measurement, TuningRecord

#: The config a vendor baseline is recorded under (it has no params).
VENDOR_CONFIG_ID = "vendor"


class Baselines:
    """The baselines one bench task measures: ``requests`` to time (role by config id), and the
    default baseline taken from the task's own measurements when its config is among them."""

    def __init__(self, unit: BenchUnit, wanted: bool, request: Callable[[Config], BenchRequest],
                 default_measured: Callable[[str], bool]) -> None:
        """``request`` makes a config's request; ``default_measured(config_id)`` says whether the
        task's measurements will hold that config at full length."""
        self.unit = unit
        self.roles: dict[str, str] = {}  # config id -> "default" or "vendor"
        self.requests: list[BenchRequest] = []
        self.default_from_configs = False
        self.measured: dict[str, ConfigMeasurement] = {}
        if not wanted:
            return
        default = unit.default_config
        if default is not None:
            if default_measured(default.id):
                self.default_from_configs = True
            else:
                self._add("default", request(default))
        if unit.vendor:
            self._add("vendor", replace(request(Config(())), launch_ref=unit.vendor, config_id=VENDOR_CONFIG_ID,
                                        plain=True))

    def _add(self, role: str, request: BenchRequest) -> None:
        self.roles[request.config_id] = role
        self.requests.append(replace(request, baseline=True))

    def take(self, measured: list[ConfigMeasurement]) -> list[ConfigMeasurement]:
        """Keep the baselines' results out of a batch's; returns the configs' results."""
        configs = []
        for m in measured:
            if m.config_id in self.roles:
                self.measured[self.roles[m.config_id]] = m
            else:
                configs.append(m)
        return configs

    def protos(self, entries: dict[str, Measurement]) -> dict[str, Measurement]:
        """Role -> the baseline's measurement: timed now, or the default config's own entry."""
        out = {}
        if "default" in self.measured:
            out["default"] = measurement_proto(self.measured["default"], self.unit.default_config)
        elif self.default_from_configs and self.unit.default_config.id in entries:
            out["default"] = entries[self.unit.default_config.id]
        if "vendor" in self.measured:
            out["vendor"] = measurement_proto(self.measured["vendor"], Config(()))
        return out


def baselines_to_proto(record: TuningRecord, unit: BenchUnit, previous: TuningRecord | None,
                       measured: dict[str, Measurement]) -> None:
    """The planned baselines: measured now, or kept from the previous record that holds them."""
    if not unit.baselines_fingerprint:
        return
    if not measured:
        if previous is not None and previous.baselines_fingerprint == unit.baselines_fingerprint:
            for field in ("default_baseline", "vendor_baseline"):
                if previous.HasField(field):
                    getattr(record, field).CopyFrom(getattr(previous, field))
            record.vendor, record.baselines_fingerprint = previous.vendor, previous.baselines_fingerprint
        return
    if "default" in measured:
        record.default_baseline.CopyFrom(measured["default"])
    if "vendor" in measured:
        record.vendor_baseline.CopyFrom(measured["vendor"])
    record.vendor, record.baselines_fingerprint = unit.vendor, unit.baselines_fingerprint
