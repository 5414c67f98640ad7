"""What the CLI and the HTTP API do, once: requests in, store and object store calls, views out.

Neither Dagster nor torch is imported here; the pipeline (defs/) picks up what these functions
queue, and runs the steps of ``pipelines/`` (which imports nothing of this package).
"""
