"""`--wait` without a daemon runs the request in its own process (``job.execute_in_process``):
its step still takes the worker by the run's priority against the other steps waiting for it
(Dagster's in-process executor claims the pool's slot with the ``dagster/priority`` tag, and a
freed slot goes to the waiting step of the highest priority, then the oldest), and the command
tells its wait meanwhile."""

from __future__ import annotations

import threading
import uuid

import dagster as dg

from stash_pipeline.dagster_runs.waits import INVOCATION_TAG, telling_wait
from stash_pipeline.defs.worker_queue import priority_tags
from stash_pipeline.defs.worker_runs import REWARD_POOL
from stash_pipeline_tests.support.waiting import wait_until

worked: list[str] = []


@dg.op(pool=REWARD_POOL, config_schema={"kind": str})
def trace_scores(context) -> None:  # no hint: Dagster reads it unresolved here
    worked.append(context.op_config["kind"])


@dg.job(name="trace_scoring")
def trace_scoring() -> None:
    trace_scores()


def pending(instance: dg.DagsterInstance) -> set[str]:
    """The runs whose step waits for the worker's slot."""
    info = instance.event_log_storage.get_concurrency_info(REWARD_POOL)
    return {step.run_id for step in info.pending_steps if step.assigned_timestamp is None}


def test_a_request_run_here_takes_the_worker_before_background_work_waiting_longer(instance):
    storage = instance.event_log_storage
    storage.set_concurrency_slots(REWARD_POOL, 1)
    holder = instance.add_run(dg.DagsterRun(job_name="trace_scoring", run_id="holder",
                                            status=dg.DagsterRunStatus.STARTED))
    assert storage.claim_concurrency_slot(REWARD_POOL, holder.run_id, "trace_scores").is_claimed
    worked.clear()
    said: list[str] = []
    results: dict[str, dg.ExecuteInProcessResult] = {}

    def command(kind: str, say=None) -> threading.Thread:
        """A `--wait` command running its request's run here, as in_process does."""
        invocation = uuid.uuid4().hex

        def run() -> None:
            with telling_wait(instance, invocation, say):
                results[kind] = trace_scoring.execute_in_process(
                    instance=instance, run_config={"ops": {"trace_scores": {"config": {
                        "kind": kind}}}},
                    tags={**priority_tags(kind), INVOCATION_TAG: invocation})

        thread = threading.Thread(target=run)
        thread.start()
        return thread

    background = command("background")
    wait_until(lambda: len(pending(instance)) == 1, timeout_s=60,
               what="the background run's step to wait for the worker")
    request = command("request", said.append)
    wait_until(lambda: len(pending(instance)) == 2, timeout_s=60,
               what="the request's step to wait for the worker")
    wait_until(lambda: bool(said), timeout_s=60, what="the request to tell its wait")
    storage.free_concurrency_slots_for_run(holder.run_id)
    request.join()
    background.join()
    assert worked == ["request", "background"]
    assert all(result.success for result in results.values())
    # Ahead of it: the run holding the worker, not the background run that waited longer (then
    # none, if the teller looked between the slot's release and the request's claim).
    assert said[0] == "waiting for the worker: 1 run ahead"
    assert set(said[1:]) <= {"waiting for the worker: 0 runs ahead"}, said
