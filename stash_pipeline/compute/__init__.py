"""Running the worker: the job directory contract, and local or Modal compute through Dagster Pipes.

This package never imports torch. ``compute.contract`` (what a job directory holds) and
``compute.worker_log`` (its worker.log) import only ``core``, so the worker, which runs in its own
process, reads the same contract without pulling in Dagster.
"""
