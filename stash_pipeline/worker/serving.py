"""The scoring server's engine: loaded checkpoints kept warm, and concurrent requests read
together.

``Engine.submit`` plans a request in the caller's thread (``rewards.plan``: rendering and
tokenising, one thread per model at a time) and queues it; one scoring thread runs the queue.
When it is free it waits ``gather_s`` for more requests, then takes, oldest first, the queued
requests for the oldest request's model whose tokens fit ``batch_tokens`` (always at least one),
reads them in one ``rewards.read_plans`` call (forwards of at most ``batch_tokens`` padded tokens
each, ``batching.read_rows``) and answers each. A request whose deadline passed while it waited is
answered ``DeadlinePassed`` without being read. ``stats`` counts requests, batches, forwards and
tokens: counts that do not drift, for tests and benchmarks.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Hashable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from stash_pipeline.core.errors import UnavailableError
from stash_pipeline.core.reward_requests import RewardRequest
from stash_pipeline.worker.batching import default_batch_tokens
from stash_pipeline.worker.rewards import LoadedModel, Plan, plan, read_plans
from stash_pipeline.worker.scoring import RewardModel

# How long the free scoring thread waits for more requests before a forward: concurrent requests
# arriving within it share the forward (a forward of a 0.6B model takes tens of milliseconds).
DEFAULT_GATHER_S = 0.005
# Requests waiting at once; one more is refused at once (the API answers 503 with Retry-After).
DEFAULT_MAX_QUEUE = 256


class EngineBusy(UnavailableError):
    retry_after_s = 1


class DeadlinePassed(UnavailableError):
    retry_after_s = 1


class ModelNotLoaded(UnavailableError):
    """The engine holds no model under this key (dropped while a request was on its way)."""

    retry_after_s = 1


def load_model(path: str, *, device: str | None = None) -> RewardModel:
    """A checkpoint (``reward-model/`` or its archive) loaded as stored scoring loads it:
    ``open_checkpoint``'s tokenizer, template and window, fp32 weights, scored in the settings'
    default precision (bf16 autocast on an accelerator)."""
    return RewardModel(path, device=device)


@dataclass
class EngineStats:
    requests: int = 0  # answered, read or not
    batches: int = 0  # read_plans calls
    forwards: int = 0  # model forwards
    tokens: int = 0  # tokens of the rows forwarded
    largest_batch: int = 0  # requests one batch read together

    def as_dict(self) -> dict[str, int]:
        return dict(vars(self))


@dataclass
class _Queued:
    key: str
    plan: Plan
    future: Future[dict[str, Any]]
    deadline: float  # time.monotonic()
    queued_at: float = field(default_factory=time.monotonic)


@dataclass
class _Slot:
    loaded: LoadedModel
    planning: threading.Lock = field(default_factory=threading.Lock)


class Engine:
    def __init__(self, *, batch_tokens: int | None = None, gather_s: float = DEFAULT_GATHER_S,
                 max_queue: int = DEFAULT_MAX_QUEUE):
        self.batch_tokens = batch_tokens
        self.gather_s = gather_s
        self.max_queue = max_queue
        self.stats = EngineStats()
        self._models: dict[str, _Slot] = {}
        self._queue: deque[_Queued] = deque()
        self._changed = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="scoring", daemon=True)
        self._thread.start()

    # --- models --------------------------------------------------------------------------------

    def add_model(self, key: str, loaded: LoadedModel) -> None:
        with self._changed:
            self._models[key] = _Slot(loaded)

    def remove_model(self, key: str) -> None:
        with self._changed:
            self._models.pop(key, None)

    def models(self) -> list[str]:
        with self._changed:
            return list(self._models)

    def model(self, key: str) -> LoadedModel:
        return self._slot(key).loaded

    def _slot(self, key: str) -> _Slot:
        with self._changed:
            slot = self._models.get(key)
        if slot is None:
            raise ModelNotLoaded(f"no model {key} is loaded")
        return slot

    def budget(self, key: str) -> int:
        """Padded tokens a forward of this model holds at most (and a batch gathers)."""
        return self.batch_tokens or default_batch_tokens(self.model(key).device)

    # --- requests ------------------------------------------------------------------------------

    def submit(self, key: str, request: RewardRequest, *, timeout_s: float
               ) -> Future[dict[str, Any]]:
        """Plan ``request`` for model ``key`` here and queue it; the future gives its answer, or
        ``DeadlinePassed`` once ``timeout_s`` passed before it was read. ``EngineBusy`` when the
        queue is full; InputError for what the model cannot read."""
        slot = self._slot(key)
        deadline = time.monotonic() + timeout_s
        with self._changed:
            if len(self._queue) >= self.max_queue:
                raise EngineBusy(f"{len(self._queue)} scoring requests are waiting already")
        with slot.planning:
            planned = plan(slot.loaded, request)
        future: Future[dict[str, Any]] = Future()
        with self._changed:
            if self._closed:
                raise EngineBusy("the scoring server is shutting down")
            self._queue.append(_Queued(key, planned, future, deadline))
            self._changed.notify_all()
        return future

    def score(self, key: str, request: RewardRequest, *, timeout_s: float) -> dict[str, Any]:
        """``submit`` and wait for the answer."""
        return self.submit(key, request, timeout_s=timeout_s).result(timeout=timeout_s + 60)

    def close(self) -> None:
        with self._changed:
            self._closed = True
            self._changed.notify_all()
        self._thread.join(timeout=60)

    # --- the scoring thread --------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._changed:
                while not self._queue and not self._closed:
                    self._changed.wait()
                if self._closed:
                    waiting, self._queue = list(self._queue), deque()
                    break
                first = self._queue[0].queued_at
            time.sleep(max(0.0, first + self.gather_s - time.monotonic()))
            batch, expired = self._take_batch()
            for item in expired:
                self.stats.requests += 1
                item.future.set_exception(DeadlinePassed(
                    "the request waited past its time limit before the scoring server could "
                    "read it"))
            if batch:
                self._read(batch)
        for item in waiting:
            item.future.set_exception(EngineBusy("the scoring server is shutting down"))

    def _take_batch(self) -> tuple[list[_Queued], list[_Queued]]:
        """The oldest request's model's queued requests, oldest first, within the token budget;
        and the requests whose deadline passed (taken out of the queue, not read)."""
        now = time.monotonic()
        with self._changed:
            expired = [item for item in self._queue if item.deadline <= now]
            live = deque(item for item in self._queue if item.deadline > now)
            if not live:
                self._queue = live
                return [], expired
            key = live[0].key
            try:
                budget = self.budget(key)
            except ModelNotLoaded:
                budget = 0  # removed while queued: answered by _read
            batch: list[_Queued] = []
            tokens = 0
            rest: deque[_Queued] = deque()
            for item in live:
                fits = not batch or tokens + item.plan.tokens <= budget
                if item.key == key and fits:
                    batch.append(item)
                    tokens += item.plan.tokens
                else:
                    rest.append(item)
            self._queue = rest
        return batch, expired

    def _read(self, batch: Sequence[_Queued]) -> None:
        key = batch[0].key

        def counted(_keys: Sequence[Hashable], tokens: int) -> None:
            self.stats.forwards += 1
            self.stats.tokens += tokens

        try:
            loaded = self.model(key)
            rewards = read_plans(loaded, [item.plan for item in batch],
                                 batch_tokens=self.budget(key), on_batch=counted)
            answers = [item.plan.answer(rewards) for item in batch]
        except Exception as error:  # noqa: BLE001 - every waiting caller learns what failed
            for item in batch:
                item.future.set_exception(error)
        else:
            for item, answer in zip(batch, answers):
                item.future.set_result(answer)
        finally:
            self.stats.requests += len(batch)
            self.stats.batches += 1
            self.stats.largest_batch = max(self.stats.largest_batch, len(batch))
