"""The run queue of an instance where a person waits for runs (Score again): Dagster's
``QueuedRunCoordinator``, with the daemon's sensor loop as short as the requests need.

Dagster's sensor daemon looks at its sensors at most every 5 seconds (``MIN_INTERVAL_LOOP_TIME``
in ``dagster._daemon.sensor``, a constant no setting reaches), whatever a sensor's own
``minimum_interval_seconds``: a request then waits 0 to 5 s before its sensor even runs, and as
much again for the run queue (``dequeue_interval_seconds``, 5 by default). The daemon builds its
run coordinator as it starts, so this one sets that loop (``sensor_loop_seconds``, default
``SENSOR_LOOP_S``) in the daemon's process; each sensor still ticks no more often than its own
minimum interval (``defs.sensor_cursors.REQUEST_INTERVAL_S`` for the request sensors).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dagster import Field, Float
from dagster._core.run_coordinator import QueuedRunCoordinator
from dagster._serdes import ConfigurableClassData

SENSOR_LOOP_S = 1.0


class PromptRunCoordinator(QueuedRunCoordinator):
    """``QueuedRunCoordinator`` plus ``sensor_loop_seconds``: how often the sensor daemon of
    the process that builds it looks at the sensors that are due."""

    @classmethod
    def config_type(cls) -> dict[str, Any]:
        return {**super().config_type(),
                "sensor_loop_seconds": Field(
                    Float, is_required=False, default_value=SENSOR_LOOP_S,
                    description="How often the sensor daemon looks for sensors that are due "
                                "(Dagster's own loop: 5 s).")}

    @classmethod
    def from_config_value(cls, inst_data: ConfigurableClassData,
                          config_value: Mapping[str, Any]) -> PromptRunCoordinator:
        settings = dict(config_value)
        use_sensor_loop(float(settings.pop("sensor_loop_seconds", SENSOR_LOOP_S)))
        return super().from_config_value(inst_data, settings)


def use_sensor_loop(seconds: float) -> None:
    """Set the sensor daemon's loop in this process (``dagster._daemon.sensor`` reads it at the
    end of every pass)."""
    from dagster._daemon import sensor

    if not hasattr(sensor, "MIN_INTERVAL_LOOP_TIME"):  # a Dagster that renamed it: say so
        raise RuntimeError("dagster._daemon.sensor.MIN_INTERVAL_LOOP_TIME is gone: this Dagster "
                           "sets its sensor loop another way; update stash_pipeline/run_queue.py")
    sensor.MIN_INTERVAL_LOOP_TIME = seconds
