"""Pure domain logic: no I/O, no Dagster, no torch."""
