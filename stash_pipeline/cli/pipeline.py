"""The CLI's one way into the pipeline: the Dagster instance and the definitions (``instance``,
``defs/``) are reached from the commands through this module only.

Every function imports what it needs when it is called: `--help` and the commands that never
start a run (listing, importing without a run) do not pay for Dagster's or the definitions'
imports.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import dagster as dg

    from stash_pipeline.defs.personal.partitions import NamedModel
    from stash_pipeline.instance import RunProgress


def run_sensor(sensor: str, *, partition_keys: Sequence[str] | None = None,
               run_keys: Sequence[str] | None = None, once_per_run_key: bool = False,
               on_run: Callable[[str], None] | None = None) -> list[dg.DagsterRun]:
    """Evaluate the pipeline's ``sensor`` once and run what it requests, in this process, on the
    local instance (``instance.run_sensor_requests``); the finished runs."""
    from stash_pipeline.instance import definitions, get_instance, run_sensor_requests

    return run_sensor_requests(get_instance(), definitions(), sensor,
                               partition_keys=partition_keys, run_keys=run_keys,
                               once_per_run_key=once_per_run_key, on_run=on_run)



def run_sensor_until_done(sensor: str, *, on_run: Callable[[str], None] | None = None) -> int:
    """``run_sensor`` tick after tick (each hands out at most the sensor's limit), on one load of
    the definitions, until a tick requests nothing or a run fails; the number of failed runs."""
    from stash_pipeline.instance import definitions, get_instance, run_sensor_requests

    instance, defs = get_instance(), definitions()
    failed = 0
    while True:
        runs = run_sensor_requests(instance, defs, sensor, on_run=on_run)
        failed += sum(not run.is_success for run in runs)
        if not runs or failed:
            return failed

def model_partition_key(model: NamedModel) -> str:
    """The partition of a personal reward model's runs."""
    from stash_pipeline.defs.personal.partitions import model_partition_key as key

    return key(model)


def shared_training_run_key(request_id: int) -> str:
    """The run key the shared-training sensor gives a training request's run."""
    from stash_pipeline.defs.shared.sensors import request_run_key

    return request_run_key(request_id)


def training_run_result(run_id: str) -> tuple[str | None, list[str]]:
    """A shared-training run's candidate (None before it made one) and its failed steps, each in
    its own words."""
    from stash_pipeline.defs.runs import step_failures
    from stash_pipeline.defs.shared.candidate import candidate_of_run
    from stash_pipeline.instance import get_instance

    instance = get_instance()
    return candidate_of_run(instance, run_id), step_failures(instance, run_id)


def run_progress(run_id: str) -> RunProgress:
    """How far a running run got (its step, the worker's newest progress line)."""
    from stash_pipeline.instance import run_progress as progress

    return progress(run_id)


def fail_abandoned_runs() -> list[dg.DagsterRun]:
    """Fail the runs whose command was killed; the runs failed now."""
    from stash_pipeline.instance import fail_abandoned_runs as fail, get_instance

    return fail(get_instance())


def record_import(report: Any, warn: Callable[[str], None]) -> None:
    """An import in the instance's asset history (``instance.record_import``)."""
    from stash_pipeline.instance import record_import as record

    record(report, warn)


def dagster_home() -> Path:
    """The instance folder (``DAGSTER_HOME``, else ``$STASH_HOME/dagster``, created)."""
    from stash_pipeline.instance import dagster_home as home

    return home()


def model_queue_fields(model: Any) -> dict[str, Any]:
    """A model's wait and latest Score again from the run queue
    (``instance.model_queue_fields``)."""
    from stash_pipeline.instance import model_queue_fields as fields

    return fields(model)


def request_state(tags: Any) -> dict[str, Any]:
    """Where the request whose run carries ``tags`` stands (``instance.request_state``)."""
    from stash_pipeline.instance import request_state as state

    return state(tags)


def served_definitions(host: str, port: int, timeout_s: float) -> str:
    """What the code server at ``host:port`` serves (its location and definitions); raises
    ``CodeServerUnhealthy`` naming why it does not."""
    import grpc
    from dagster._grpc.__generated__ import dagster_api_pb2
    from dagster._grpc.client import DagsterGrpcClient
    from dagster._grpc.types import ListRepositoriesResponse
    from dagster._serdes import deserialize_value
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    address = f"{host}:{port}"
    try:
        with grpc.insecure_channel(address) as channel:
            status = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service="DagsterApi"), timeout=timeout_s).status
        reply = DagsterGrpcClient(host=host, port=port)._query(
            "ListRepositories", dagster_api_pb2.ListRepositoriesRequest, timeout=timeout_s)
    except Exception as error:  # noqa: BLE001 - gRPC's error, or Dagster's client's around it
        cause = error if isinstance(error, grpc.RpcError) else error.__cause__
        code = cause.code().name if isinstance(cause, grpc.RpcError) else type(error).__name__
        raise CodeServerUnhealthy(f"no answer from a code server at {address} within "
                                  f"{timeout_s:g} s ({code})") from None
    if status != health_pb2.HealthCheckResponse.SERVING:
        raise CodeServerUnhealthy(f"the code server at {address} says "
                                  f"{health_pb2.HealthCheckResponse.ServingStatus.Name(status)}")
    served = deserialize_value(reply.serialized_list_repositories_response_or_error)
    if not isinstance(served, ListRepositoriesResponse):
        first = (getattr(served, "message", "") or "").strip().splitlines()
        raise CodeServerUnhealthy(f"the code server at {address} could not load its "
                                  f"definitions: {first[0] if first else served}")
    loaded = "; ".join(pointer.describe() for pointer in
                       served.repository_code_pointer_dict.values())
    return f"the code server at {address} serves the definitions ({loaded})"


class CodeServerUnhealthy(Exception):
    """A code server that does not serve the pipeline's definitions; the message says why."""
