"""What a `--wait` command shows of its run: a line (or a bar) per long phase of the worker."""

from __future__ import annotations

import io

from stash_pipeline.compute.worker_log import phase_done_line, phase_started_line, step_line
from stash_pipeline.dagster_runs.console import PhaseDisplay

WORKER_LINES = [
    "torch 2.13.0+cpu, transformers 5.24.0",
    phase_started_line("inputs"), phase_done_line("inputs", 0.2),
    phase_started_line("training"),
    step_line(1, 2, 0.7, 30.0), step_line(2, 2, 0.6, 31.0),
    phase_done_line("training", 1.25),
    phase_started_line("evaluation"),
    "evaluation: 38/38 pairs, 349.4 pairs/s, about 0 s left",
    phase_done_line("evaluation", 0.11),
    phase_started_line("scoring"),
    "scoring: 10/21 traces, 40/92 actions, 877.3 actions/s, about 1 s left",
    "scoring: 21/21 traces, 92/92 actions, 877.3 actions/s, about 0 s left",
    "scored 21 traces",
    phase_done_line("scoring", 0.5),
]


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_in_a_log_each_long_phase_is_one_line_when_it_ends():
    stream = io.StringIO()
    display = PhaseDisplay(stream)
    for line in WORKER_LINES:
        display.worker_line(line)
    assert stream.getvalue().splitlines() == [
        "  training: 2/2 steps, loss 0.6000 in 1.2 s",
        "  evaluation: 38/38 pairs in 0.1 s",
        "  scoring: 21/21 traces, 92/92 actions in 0.5 s",
    ]


def test_on_a_terminal_each_long_phase_is_a_bar_on_its_own_line():
    stream = Terminal()
    display = PhaseDisplay(stream)
    for line in WORKER_LINES:
        display.worker_line(line)
    shown = [screen.rsplit("\r", 1)[-1] for screen in stream.getvalue().split("\n")[:-1]]
    assert [line.split(":")[0] for line in shown] == ["training", "evaluation", "scoring"]
    assert "2/2" in shown[0] and "loss 0.6000" in shown[0]
    assert "92/92" in shown[2] and "21/21 traces" in shown[2]


def test_a_phase_without_counting_lines_says_what_it_scored_or_nothing():
    stream = io.StringIO()
    display = PhaseDisplay(stream)
    for line in [phase_started_line("scoring"), phase_done_line("scoring", 0.01),
                 phase_started_line("scoring"), "scored 19 benchmark pairs",
                 phase_done_line("scoring", 1.5)]:
        display.worker_line(line)
    assert stream.getvalue().splitlines() == ["  scoring: 19 benchmark pairs in 1.5 s"]


def test_a_phase_the_worker_never_ended_is_closed_by_what_follows():
    stream = io.StringIO()
    display = PhaseDisplay(stream)
    display.worker_line(phase_started_line("training"))
    display.worker_line(step_line(1, 4, 0.7, 30.0))
    display.say("error: Execution of step \"personal_checkpoint\" failed: killed")
    assert stream.getvalue().splitlines() == [
        "  error: Execution of step \"personal_checkpoint\" failed: killed"]
