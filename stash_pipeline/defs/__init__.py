"""Dagster definitions (assets, sensors, schedules), one folder per concern; loaded by
definitions.py."""
