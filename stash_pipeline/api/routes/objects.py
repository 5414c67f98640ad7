"""Signed downloads of the local object store: the URL is the credential, no API key needed."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import FileResponse

from stash_pipeline.api.deps import ObjectsDep
from stash_pipeline.core.errors import NotFoundError
from stash_pipeline.objects import (
    DownloadSignatureError,
    LocalObjectStore,
    ObjectLocationError,
    ObjectNotFoundError,
    ObjectStoreConfigError,
)

router = APIRouter(tags=["downloads"])


@router.get("/api/v1/objects/{key:path}", responses={
    200: {"content": {"application/gzip": {}}, "description": "The object's bytes."},
    403: {"description": "The URL expired or was altered."},
    404: {"description": "No such object (or no local object store)."}})
def download(key: str, objects: ObjectsDep, expires: str | None = None,
             signature: str | None = None) -> FileResponse:
    """What `GET /api/v1/rm/reward-models/{id}/weights` links to when checkpoints are kept in the
    local directory; S3 deployments hand out presigned S3 URLs instead."""
    if not isinstance(objects, LocalObjectStore):
        raise NotFoundError("this deployment keeps objects in S3; there is nothing to serve here")
    if not expires or not signature:
        raise DownloadSignatureError("a download URL needs its expires and signature")
    try:
        path = objects.verify_signed_download(key, expires, signature)
    except ObjectLocationError:
        raise DownloadSignatureError("this URL was not signed for that key") from None
    # Neither message names the server's files (the store's own messages do).
    except ObjectNotFoundError:
        raise NotFoundError("no object with that key: it was deleted, or never stored") from None
    except ObjectStoreConfigError:
        raise NotFoundError("this deployment serves no signed downloads") from None
    return FileResponse(path, media_type="application/gzip", filename=key.rsplit("/", 1)[-1])
