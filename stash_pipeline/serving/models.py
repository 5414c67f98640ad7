"""Which checkpoints the scoring server holds, and loading them: the current release and the
chosen personal models kept warm (pinned), any other succeeded model loaded when first asked for
and dropped, least recently used first, beyond ``max_models``.

An evaluator is named as stored scoring names it (a release version or a personal model id) and
resolved as stored scoring resolves it (``pipelines.trace_scoring.scorer_of``: a succeeded model
with a checkpoint, or a release). Loading runs on a thread of its own, one checkpoint at a time:
the archive is downloaded from the object store into a temporary folder and loaded by
``worker.serving.load_model`` (the loader stored scoring uses), then handed to the engine.
"""

from __future__ import annotations

import logging
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stash_pipeline.core.errors import NotFoundError, UnavailableError
from stash_pipeline.pipelines.trace_scoring import scorer_of
from stash_pipeline.store import Store
from stash_pipeline.store.scoring_work import models_kept_current

log = logging.getLogger(__name__)
DEFAULT_MAX_MODELS = 8
# A checkpoint that failed to load is tried again on a request after this many seconds.
RETRY_FAILED_S = 30


class ModelLoading(UnavailableError):
    retry_after_s = 5


class ModelFailed(UnavailableError):
    retry_after_s = RETRY_FAILED_S


@dataclass
class ModelState:
    evaluator: str
    kind: str  # "shared" (a release) or "personal"
    state: str = "loading"  # loading, ready or failed
    error: str | None = None
    pinned: bool = False
    last_used: float = field(default_factory=time.monotonic)
    failed_at: float = 0.0
    ready: threading.Event = field(default_factory=threading.Event)  # set when loaded or failed

    def view(self) -> dict[str, Any]:
        return {"evaluator": self.evaluator, "kind": self.kind, "state": self.state,
                "pinned": self.pinned, "error": self.error}


class ModelRegistry:
    """The evaluators the engine (``worker.serving.Engine``) holds. ``load(path, device)`` loads a
    checkpoint (default ``worker.serving.load_model``)."""

    def __init__(self, store: Store, objects: Any, engine: Any, *, device: str | None = None,
                 max_models: int = DEFAULT_MAX_MODELS, chosen: Iterable[str] = (),
                 load: Callable[..., Any] | None = None):
        self.store, self.objects, self.engine = store, objects, engine
        self.device, self.max_models, self.chosen = device, max_models, tuple(chosen)
        self._load = load
        self._states: dict[str, ModelState] = {}
        self._lock = threading.Lock()
        self._loader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="model-loader")
        self.release: str | None = None  # the current release's version, as last refreshed

    # --- what is held --------------------------------------------------------------------------

    def states(self) -> list[dict[str, Any]]:
        with self._lock:
            return [s.view() for s in self._states.values()]

    def refresh(self) -> None:
        """Pin and load the current release (a newer one replaces the pinned older one) and the
        chosen personal models: ``chosen``, else each owner's most recent succeeded ones
        (``STASH_PERSONAL_SCORING_MODELS``), newest first, up to ``max_models`` in all."""
        latest = self.store.latest_release()
        self.release = latest.version if latest else None
        wanted = [self.release] if self.release else []
        personal = list(self.chosen) or [m.id for m in sorted(
            self.store.models_kept_current(models_kept_current()),
            key=lambda m: m.finished_at.timestamp() if m.finished_at else 0.0, reverse=True)]
        wanted += personal[: max(0, self.max_models - len(wanted))]
        with self._lock:
            for state in self._states.values():
                state.pinned = state.evaluator in wanted
        for evaluator in wanted:
            try:
                self.ensure(evaluator, pin=True)
            except NotFoundError as error:
                log.warning("not serving %s: %s", evaluator, error)

    # --- asking for one ------------------------------------------------------------------------

    def ensure(self, evaluator: str, *, pin: bool = False) -> ModelState:
        """The evaluator's state, its loading started if it is not held (NotFoundError when no
        succeeded model or release has this name)."""
        with self._lock:
            state = self._states.get(evaluator)
            if state is not None and not (state.state == "failed"
                                          and time.monotonic() - state.failed_at > RETRY_FAILED_S):
                state.last_used = time.monotonic()
                state.pinned = state.pinned or pin
                return state
        scorer = scorer_of(self.store, evaluator)  # outside the lock: it reads the store
        with self._lock:
            state = self._states.get(evaluator)
            if state is None or state.state == "failed":
                state = ModelState(evaluator, "shared" if scorer.shared else "personal",
                                   pinned=pin)
                self._states[evaluator] = state
                self._loader.submit(self._load_into_engine, state, scorer.checkpoint_uri)
            return state

    def ready(self, evaluator: str, timeout_s: float) -> ModelState:
        """The loaded evaluator, waiting up to ``timeout_s`` for its loading; ``ModelLoading``
        (503) when it is still loading then, ``ModelFailed`` when it could not be loaded."""
        state = self.ensure(evaluator)
        state.ready.wait(timeout_s)
        if state.state == "ready":
            return state
        if state.state == "failed":
            raise ModelFailed(f"the checkpoint of {evaluator} could not be loaded: {state.error}")
        raise ModelLoading(f"the scoring server is still loading {evaluator}")

    def close(self) -> None:
        self._loader.shutdown(wait=True, cancel_futures=True)

    # --- loading -------------------------------------------------------------------------------

    def _load_into_engine(self, state: ModelState, uri: str) -> None:
        started = time.monotonic()
        try:
            loaded = download_and_load(self.objects, uri, self._load, device=self.device)
            self.engine.add_model(state.evaluator, loaded)
        except Exception as error:
            log.error("loading %s failed: %s", state.evaluator, error, exc_info=error)
            with self._lock:
                state.state, state.error, state.failed_at = "failed", str(error), time.monotonic()
        else:
            log.info("loaded %s in %.1f s", state.evaluator, time.monotonic() - started)
            with self._lock:
                state.state = "ready"
            self._evict()
        finally:
            state.ready.set()

    def _evict(self) -> None:
        """Drop the least recently used unpinned models beyond ``max_models``."""
        with self._lock:
            held = sorted((s for s in self._states.values() if s.state == "ready"),
                          key=lambda s: s.last_used)
            excess = len(held) - self.max_models
            dropped = [s for s in held if not s.pinned][: max(0, excess)]
            for state in dropped:
                del self._states[state.evaluator]
        for state in dropped:
            self.engine.remove_model(state.evaluator)
            log.info("dropped %s (least recently used beyond %d models)", state.evaluator,
                     self.max_models)


def download_and_load(objects: Any, uri: str, load: Callable[..., Any] | None = None, *,
                      device: str | None = None) -> Any:
    """The checkpoint archive at ``uri`` downloaded into a temporary folder and loaded (default
    ``worker.serving.load_model``, which keeps what it needs in memory: the folder goes)."""
    if load is None:
        from stash_pipeline.worker.serving import load_model as load
    with tempfile.TemporaryDirectory(prefix="stash-checkpoint-") as folder:
        archive = objects.get_file(uri, Path(folder) / "reward-model.tar.gz")
        return load(str(archive), device=device)
