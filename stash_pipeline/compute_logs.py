"""Dagster's step logs in the project's S3 bucket, signed with the project's S3 settings.

``dagster_aws``'s ``S3ComputeLogManager`` takes an endpoint but no keys: it signs through boto3's
own chain (``AWS_*`` variables, ``~/.aws``), so on MinIO or another S3-compatible store it would
send the logs to AWS, or nowhere. This one takes ``access_key``, ``secret_key``, ``region`` and
``endpoint_url`` in its config (``deploy/dagster.yaml`` reads them from ``S3_ACCESS_KEY``,
``S3_SECRET_KEY``, ``S3_REGION`` and ``S3_ENDPOINT`` with ``env:``) and talks to the bucket
through the client the object store builds from the same settings (``objects.s3``: signature v4,
path-style requests on a custom endpoint, standard retries).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dagster import Field, StringSource
from dagster_aws.s3.compute_log_manager import S3ComputeLogManager as DagsterS3ComputeLogManager

from stash_pipeline.objects.s3 import S3ObjectStore, S3Settings


class S3ComputeLogManager(DagsterS3ComputeLogManager):
    """``dagster_aws``'s manager (the same config, keys and layout) with the project's client.

    An empty ``endpoint_url`` means AWS's endpoint for the region, as an empty ``S3_ENDPOINT``
    does for the object store.
    """

    def __init__(self, bucket: str, *, access_key: str, secret_key: str, region: str,
                 endpoint_url: str | None = None, **kwargs: Any):
        endpoint = endpoint_url or None
        super().__init__(bucket, endpoint_url=endpoint, region=region, **kwargs)
        settings = S3Settings(bucket=bucket, region=region, access_key=access_key,
                              secret_key=secret_key, endpoint=endpoint)
        self._s3_session = S3ObjectStore(settings).client

    @classmethod
    def config_type(cls) -> dict[str, Any]:
        return {**super().config_type(),
                "access_key": Field(StringSource, is_required=True),
                "secret_key": Field(StringSource, is_required=True),
                "region": Field(StringSource, is_required=True)}

    @classmethod
    def from_config_value(cls, inst_data: Any, config_value: Mapping[str, Any]
                          ) -> S3ComputeLogManager:
        return cls(inst_data=inst_data, **config_value)
