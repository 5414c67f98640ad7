"""The scoring server's engine: loaded checkpoints kept warm, concurrent requests read together,
and work admitted by the tokens it costs.

``Engine.submit`` plans a request in the caller's thread (``rewards.plan``: rendering and
tokenising, one thread per model at a time), admits it, and queues it; one scoring thread runs the
queue. When it is free it waits ``gather_s`` for more requests, then takes, oldest first, the
queued requests for the oldest request's model whose tokens fit ``batch_tokens`` (always at least
one), reads them in one ``rewards.read_plans`` call (forwards of at most ``batch_tokens`` padded
tokens each, ``batching.read_rows``) and answers each.

Admission, not abandonment: a request is refused before it is queued, never dropped after.
- A request whose plan needs more than ``max_request_tokens`` is ``RequestTooLarge`` (an input
  error: it would never be admitted), before it is planned when a bound linear in its text
  (``rewards.least_tokens``) already says so;
- one that would take the tokens in flight (queued or being read) past ``max_tokens_in_flight``,
  or whose answer would come later than ``horizon_s`` at the measured reading rate, is
  ``EngineBusy`` with the seconds after which it would fit;
- a request whose caller cancels its future (its client left) is taken out of the queue, and a
  batch whose every request was cancelled stops between forwards.
``stats`` counts requests, batches, forwards, tokens, refusals and cancellations: counts that do
not drift, for tests and benchmarks.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Hashable, Sequence
from concurrent.futures import Future, InvalidStateError, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from stash_pipeline.core.errors import InputError, UnavailableError
from stash_pipeline.core.reward_requests import (
    IN_FLIGHT_FORWARDS,
    REQUEST_FORWARDS,
    ConversationRequest,
    RewardRequest,
)
from stash_pipeline.worker.batching import default_batch_tokens
from stash_pipeline.worker.rewards import LoadedModel, Plan, least_tokens, plan, read_plans
from stash_pipeline.worker.scoring import RewardModel

# How long the free scoring thread waits for more requests before a forward: concurrent requests
# arriving within it share the forward (a forward of a 0.6B model takes tens of milliseconds).
DEFAULT_GATHER_S = 0.005
# Requests waiting at once; one more is refused at once (the API answers 503 with Retry-After).
DEFAULT_MAX_QUEUE = 256
# The longest Retry-After: a client told to come back later than this should look elsewhere.
MAX_RETRY_AFTER_S = 60


class EngineBusy(UnavailableError):
    def __init__(self, message: str, retry_after_s: int = 1):
        super().__init__(message)
        self.retry_after_s = retry_after_s


class RequestTooLarge(InputError):
    """More tokens to read than one request may ask for: never admitted, whatever the load."""


class ModelNotLoaded(UnavailableError):
    """The engine holds no model under this key (dropped while a request was on its way)."""

    retry_after_s = 1


class _Abandoned(Exception):
    """Every request of the batch being read was cancelled: its remaining forwards are skipped."""


def load_model(path: str, *, device: str | None = None) -> RewardModel:
    """A checkpoint (``reward-model/`` or its archive) loaded as stored scoring loads it:
    ``open_checkpoint``'s tokenizer, template and window, fp32 weights, scored in the settings'
    default precision (bf16 autocast on an accelerator)."""
    return RewardModel(path, device=device)


@dataclass
class EngineStats:
    requests: int = 0  # answered, or failed while read
    batches: int = 0  # read_plans calls
    forwards: int = 0  # model forwards
    tokens: int = 0  # tokens of the rows forwarded
    largest_batch: int = 0  # requests one batch read together
    refused: int = 0  # refused at admission (EngineBusy, RequestTooLarge)
    cancelled: int = 0  # taken out of the queue, or dropped while read, because the caller left

    def as_dict(self) -> dict[str, int]:
        return dict(vars(self))


@dataclass(eq=False)  # one request is equal to itself only
class _Queued:
    key: str
    plan: Plan
    future: Future[dict[str, Any]]
    queued_at: float = field(default_factory=time.monotonic)


@dataclass
class _Slot:
    loaded: LoadedModel
    planning: threading.Lock = field(default_factory=threading.Lock)
    # One thread plans for the model (the lock serialises planning anyway): what a plan allocates
    # (a long conversation's tokens: hundreds of MB) is freed into one allocator arena and reused,
    # where a pool of threads would each keep a high-water mark of their own.
    planner: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(
        max_workers=1, thread_name_prefix="planning"))


class Engine:
    def __init__(self, *, batch_tokens: int | None = None, gather_s: float = DEFAULT_GATHER_S,
                 max_queue: int = DEFAULT_MAX_QUEUE, max_request_tokens: int | None = None,
                 max_tokens_in_flight: int | None = None):
        """``batch_tokens``: padded tokens a forward holds (default: the model's device's);
        ``max_request_tokens`` and ``max_tokens_in_flight``: the admission limits (defaults:
        ``REQUEST_FORWARDS`` and ``IN_FLIGHT_FORWARDS`` forwards of the model's budget)."""
        self.batch_tokens = batch_tokens
        self.gather_s = gather_s
        self.max_queue = max_queue
        self.max_request_tokens = max_request_tokens
        self.max_tokens_in_flight = max_tokens_in_flight
        self.stats = EngineStats()
        self.tokens_in_flight = 0  # of the requests queued or being read
        self.tokens_per_s: float | None = None  # the reading rate, measured (a moving average)
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
            slot = self._models.pop(key, None)
        if slot is not None:
            slot.planner.shutdown(wait=False)

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

    def planner(self, key: str) -> ThreadPoolExecutor:
        """The thread that plans requests for model ``key``: callers that can choose their
        thread (the server's event loop) run ``submit`` there."""
        return self._slot(key).planner

    def budget(self, key: str) -> int:
        """Padded tokens a forward of this model holds at most (and a batch gathers)."""
        return self.batch_tokens or default_batch_tokens(self.model(key).device)

    def limits(self, key: str) -> tuple[int, int]:
        """(the most tokens one request may need, the most in flight at once) for model ``key``."""
        budget = self.budget(key)
        return (self.max_request_tokens or REQUEST_FORWARDS * budget,
                self.max_tokens_in_flight or IN_FLIGHT_FORWARDS * budget)

    # --- requests ------------------------------------------------------------------------------

    def submit(self, key: str, request: RewardRequest, *, horizon_s: float | None = None
               ) -> Future[dict[str, Any]]:
        """Plan ``request`` for model ``key`` here, admit it and queue it; the future gives its
        answer. Cancelling the future takes the request out (module docstring).

        ``RequestTooLarge`` when its plan needs more than the model's request limit; ``EngineBusy``
        when the queue is full, the tokens in flight would pass their limit, or (``horizon_s``)
        its answer would come later than that at the measured rate; InputError for what the model
        cannot read."""
        slot = self._slot(key)
        most, in_flight_limit = self.limits(key)
        with self._changed:
            self._refuse_if_full(in_flight_limit, 0, horizon_s)
        self._refuse_if_large(request, least_tokens(slot.loaded, request), most, "at least ")
        with slot.planning:
            planned = plan(slot.loaded, request)
        self._refuse_if_large(request, planned.tokens, most)
        future: Future[dict[str, Any]] = Future()
        item = _Queued(key, planned, future)
        with self._changed:
            if self._closed:
                raise EngineBusy("the scoring server is shutting down", 5)
            self._refuse_if_full(in_flight_limit, planned.tokens, horizon_s)
            self._queue.append(item)
            self.tokens_in_flight += planned.tokens
            self._changed.notify_all()
        future.add_done_callback(lambda done: self._cancelled(item) if done.cancelled() else None)
        return future

    def _refuse_if_large(self, request: RewardRequest, tokens: int, most: int,
                         bound: str = "") -> None:
        """RequestTooLarge (counted) when ``request`` needs more than ``most`` tokens."""
        if tokens <= most:
            return
        with self._changed:
            self.stats.refused += 1
        conversation = isinstance(request, ConversationRequest)
        asked = "ask for the whole reward only (actions: false), " if request.actions else ""
        raise RequestTooLarge(
            f"this request needs {bound}{tokens} tokens of forwards; a request may need at most "
            f"{most} (--max-request-tokens): {asked}send fewer or shorter "
            f"{'messages' if conversation else 'candidates'}",
            field="conversation" if conversation else "candidates")

    def _refuse_if_full(self, in_flight_limit: int, tokens: int, horizon_s: float | None
                        ) -> None:
        """EngineBusy (counted) when a request of ``tokens`` cannot be admitted now (under
        ``_changed``); with ``tokens`` 0, when none could (before planning one)."""
        ahead = self.tokens_in_flight
        reason = None
        if len(self._queue) >= self.max_queue:
            reason = f"{len(self._queue)} scoring requests are waiting already"
            excess = 0
        elif ahead and (ahead >= in_flight_limit or ahead + tokens > in_flight_limit):
            reason = f"{ahead} tokens are being read or waiting already"
            excess = ahead + tokens - in_flight_limit
        elif horizon_s is not None and self.tokens_per_s and ahead and (
                ahead + tokens) / self.tokens_per_s > horizon_s:
            reason = (f"{ahead} tokens are ahead of this request: its answer would come after "
                      f"{horizon_s:g} s")
            excess = ahead + tokens - horizon_s * self.tokens_per_s
        if reason is None:
            return
        self.stats.refused += 1
        seconds = excess / self.tokens_per_s if self.tokens_per_s else 1
        raise EngineBusy(f"the scoring server is busy: {reason}",
                         min(MAX_RETRY_AFTER_S, max(1, math.ceil(seconds))))

    def score(self, key: str, request: RewardRequest) -> dict[str, Any]:
        """``submit`` and wait for the answer."""
        return self.submit(key, request).result()

    def close(self) -> None:
        with self._changed:
            self._closed = True
            self._changed.notify_all()
            slots = list(self._models.values())
        self._thread.join(timeout=60)
        for slot in slots:
            slot.planner.shutdown(wait=False)

    def _cancelled(self, item: _Queued) -> None:
        """The caller cancelled ``item``'s future: out of the queue (a batch being read checks
        its futures between forwards)."""
        with self._changed:
            if item in self._queue:
                self._queue.remove(item)
                self._release([item])
                self.stats.cancelled += 1

    def _release(self, items: Sequence[_Queued]) -> None:
        self.tokens_in_flight -= sum(item.plan.tokens for item in items)

    # --- the scoring thread --------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._changed:
                while not self._closed and not self._gathered():
                    self._changed.wait(self._gathering_s())
                if self._closed:
                    waiting, self._queue = list(self._queue), deque()
                    self._release(waiting)
                    break
            batch = self._take_batch()
            if batch:
                self._read(batch)
        for item in waiting:
            _answer(item.future, error=EngineBusy("the scoring server is shutting down", 5))

    def _gathered(self) -> bool:
        """Whether the oldest queued request has waited ``gather_s`` (under ``_changed``)."""
        return bool(self._queue) and self._gathering_s() == 0.0

    def _gathering_s(self) -> float | None:
        """Seconds the oldest queued request has still to wait for others (None: none queued)."""
        if not self._queue:
            return None
        return max(0.0, self._queue[0].queued_at + self.gather_s - time.monotonic())

    def _take_batch(self) -> list[_Queued]:
        """The oldest request's model's queued requests, oldest first, within the token budget
        (taken out of the queue; their tokens stay in flight until they are answered)."""
        with self._changed:
            if not self._queue:
                return []
            key = self._queue[0].key
            try:
                budget = self.budget(key)
            except ModelNotLoaded:
                budget = 0  # removed while queued: answered by _read
            batch: list[_Queued] = []
            tokens = 0
            rest: deque[_Queued] = deque()
            for item in self._queue:
                fits = not batch or tokens + item.plan.tokens <= budget
                if item.key == key and fits:
                    batch.append(item)
                    tokens += item.plan.tokens
                else:
                    rest.append(item)
            self._queue = rest
        return batch

    def _read(self, batch: Sequence[_Queued]) -> None:
        key = batch[0].key

        def counted(_keys: Sequence[Hashable], tokens: int) -> None:
            self.stats.forwards += 1
            self.stats.tokens += tokens
            if all(item.future.cancelled() for item in batch):
                raise _Abandoned()

        started, forwarded = time.monotonic(), self.stats.tokens
        try:
            loaded = self.model(key)
            rewards = read_plans(loaded, [item.plan for item in batch],
                                 batch_tokens=self.budget(key), on_batch=counted)
            answers = [item.plan.answer(rewards) for item in batch]
        except _Abandoned:
            self._done(batch, cancelled=True)
        except Exception as error:  # noqa: BLE001 - every waiting caller learns what failed
            self._done(batch)
            for item in batch:
                _answer(item.future, error=error)
        else:
            self._measure(self.stats.tokens - forwarded, time.monotonic() - started)
            self._done(batch)
            for item, answer in zip(batch, answers):
                _answer(item.future, answer)

    def _measure(self, tokens: int, seconds: float) -> None:
        if tokens and seconds > 0:
            rate = tokens / seconds
            self.tokens_per_s = rate if self.tokens_per_s is None else (
                0.7 * self.tokens_per_s + 0.3 * rate)

    def _done(self, batch: Sequence[_Queued], *, cancelled: bool = False) -> None:
        """Counted and released before any caller is answered, so an answered caller sees its
        own batch."""
        with self._changed:
            self._release(batch)
            gone = sum(item.future.cancelled() for item in batch)
            self.stats.cancelled += gone
            self.stats.requests += len(batch) - gone
            self.stats.batches += 1
            self.stats.largest_batch = max(self.stats.largest_batch, len(batch))


def _answer(future: Future[dict[str, Any]], answer: dict[str, Any] | None = None, *,
            error: BaseException | None = None) -> None:
    """Set ``future``'s outcome unless its caller cancelled it meanwhile."""
    try:
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(answer)
    except InvalidStateError:
        pass
