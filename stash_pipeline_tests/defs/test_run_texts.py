"""What a person reads about runs: sensor descriptions, failures that lead with their reason."""

from __future__ import annotations

import dagster as dg
import pytest

from stash_pipeline.compute.outcome import WorkerFailed
from stash_pipeline.core.failures import reason_line
from stash_pipeline.definitions import defs
from stash_pipeline.defs.worker_runs import failing_step, failure_description, failure_text

LOG_TAIL = ("attempt a1 started\nphase inputs started\nTraceback (most recent call last):\n"
            '  File "x.py", line 1\nInputError: bad\n'
            "job failed in phase inputs: InputError: train_pairs.jsonl line 2, field 'chosen': "
            "missing\n")


def test_every_sensor_says_what_it_does():
    sensors = list(defs().sensors)
    # five that start runs (queued models, Score again of a model and of chosen traces, the one
    # pending-scoring queue, retraining requests), two that watch personal runs end, one that fails
    # runs whose command died, one that retires deleted models' partitions
    assert len(sensors) == 9
    for sensor in sensors:
        assert sensor.description and len(sensor.description) > 40, sensor.name


def test_a_step_failure_leads_with_the_one_line_reason():
    error = WorkerFailed(LOG_TAIL)
    described = failure_description(error)
    first, rest = described.split("\n\n", 1)
    assert first == ("job failed in phase inputs: InputError: train_pairs.jsonl line 2, field "
                     "'chosen': missing")
    assert rest == failure_text(error)  # the whole tail stays below it
    assert reason_line(LOG_TAIL) == first
    assert failure_description(ValueError("one line")) == "ValueError: one line"
    assert reason_line(None) is None and reason_line("\n\n") is None


def test_a_failing_step_tells_its_model_then_fails_with_the_reason_first():
    told = []
    with pytest.raises(dg.Failure) as failed, failing_step(told.append):
        raise WorkerFailed(LOG_TAIL)
    assert [failure_text(error) for error in told] == [LOG_TAIL]
    assert failed.value.description == failure_description(told[0])
    assert isinstance(failed.value.__cause__, WorkerFailed)
    # A step's own Failure keeps its words; the model still hears of it.
    with pytest.raises(dg.Failure, match="no candidate") as failed, failing_step(told.append):
        raise dg.Failure(description="no candidate")
    assert failed.value.description == "no candidate" and len(told) == 2
    with failing_step(told.append):
        pass
    assert len(told) == 2


def test_a_second_start_fails_its_step_without_telling_the_model():
    """A step another process works (defs.step_leases) ends its second start; its model hears
    nothing of it."""
    from stash_pipeline.defs.step_leases import SecondStart

    told = []
    with pytest.raises(dg.Failure, match="this second start does nothing"), \
            failing_step(told.append):
        raise SecondStart("step trace_scores of run r is running in process p: this second "
                          "start does nothing")
    assert told == []
