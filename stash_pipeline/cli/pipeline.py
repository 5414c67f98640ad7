"""The CLI's one way into the pipeline's definitions (``defs/``) and a code server: the commands
reach them through this module only, and the Dagster instance (run state, ``--wait`` runs, an
import's record) through ``stash_pipeline.dagster_runs``, the door the API uses too.

Every function imports what it needs when it is called: `--help` and the commands that never
start a run (listing, importing without a run) do not pay for Dagster's or the definitions'
imports.
"""

from __future__ import annotations

from typing import Any


def model_run_key(model: Any) -> str:
    """The run key of a queued personal reward model's training run (its id and attempt)."""
    from stash_pipeline.defs.personal.sensors import training_run_key

    return training_run_key(model)


def shared_training_run_key(request_id: int) -> str:
    """The run key the shared-training sensor gives a training request's run."""
    from stash_pipeline.defs.shared.sensors import request_run_key

    return request_run_key(request_id)


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
