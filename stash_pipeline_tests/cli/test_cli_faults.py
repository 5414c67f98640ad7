"""What a CLI user sees when something fails: one line saying what happened and what to do, never
a traceback (issue 22)."""

from __future__ import annotations

import pytest

from stash_pipeline.cli import main
from test_cli_rm import home  # noqa: F401 - fixture


def test_create_wait_without_an_api_key_says_so_in_one_line(home, capsys,  # noqa: F811
                                                            monkeypatch):
    monkeypatch.delenv("STASH_EXTRACTION")
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    code = main(["rm", "create", "--name", "nokey", "--all-traces", "--base-model",
                 "/nonexistent", "--wait", "--json"])
    captured = capsys.readouterr()
    model = last_json_of(captured.out)
    assert code == 1 and model["status"] == "failed"
    assert "STASH_EXTRACTION=off" in model["error"] and "ANTHROPIC_API_KEY" in model["error"]
    assert "Traceback" not in captured.err and "Stack Trace" not in captured.err, captured.err
    [failure] = [line for line in captured.err.splitlines() if "STEP_FAILURE" in line]
    assert "STASH_EXTRACTION=off" in failure


def test_an_unexpected_error_is_one_line_without_a_traceback(home, capsys,  # noqa: F811
                                                             monkeypatch):
    from stash_pipeline.services import reward_models

    def broken(*_args, **_kwargs):
        raise KeyError("boom")

    monkeypatch.setattr(reward_models, "list_models", broken)
    assert main(["rm", "list"]) == 1
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: unexpected KeyError: 'boom'") and "STASH_DEBUG=1" in line
    monkeypatch.setenv("STASH_DEBUG", "1")
    with pytest.raises(KeyError):
        main(["rm", "list"])


def last_json_of(out: str) -> dict:
    import json

    return json.loads(out.strip().splitlines()[-1])
