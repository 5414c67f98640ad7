"""One start of a worker step, as a process of its own: ``python -m
stash_pipeline_tests.support.lease_start DATABASE_URL RUN_ID STEP MODEL_ID GO_FILE [SLOTS]``.
Under the step's lease (defs.step_leases; with SLOTS, one of that many worker slots too, saying
``waiting for the worker, ...`` while none is free) it marks the model running, says
``working``, waits for GO_FILE, then marks the model succeeded; a start that finds the step
worked elsewhere, or done, says ``second start: ...`` and exits 3 having changed nothing."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from stash_pipeline.defs.step_leases import SecondStart, step_lease
from stash_pipeline.store import Store

SECOND_START_EXIT = 3


def main(url: str, run_id: str, step: str, model_id: str, go: str, slots: str = "0") -> int:
    store = Store(url)
    try:
        with step_lease(store, run_id, step, worker_slots=int(slots),
                        on_wait=lambda text: print(text, flush=True)):
            if store.get_reward_model(model_id).status == "queued":
                store.mark_running(model_id, run_id)
            print("working", flush=True)
            while not Path(go).exists():
                time.sleep(0.05)
            store.mark_succeeded(model_id, metrics={"train_pairs": 2},
                                 checkpoint_uri="file:///m.tar.gz")
    except SecondStart as error:
        print(f"second start: {error}", flush=True)
        return SECOND_START_EXIT
    finally:
        store.dispose()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(*sys.argv[1:]))
