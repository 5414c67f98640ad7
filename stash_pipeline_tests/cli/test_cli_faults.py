"""What a CLI user sees when something fails: one line saying what happened and what to do, never
a traceback (issue 22)."""

from __future__ import annotations

import pytest

from stash_pipeline.cli import main
from stash_pipeline_tests.support.cli_helpers import home  # noqa: F401 - fixture


def test_a_step_that_fails_under_wait_says_so_in_one_line(home, capsys, monkeypatch):
    """A --wait whose run's step fails: the model failed with the worker's reason, and the
    command's stderr one line naming the step, never a traceback. (Without an extraction key
    the command refuses before queueing: test_cli_traces.)"""
    monkeypatch.setenv("STASH_EXTRACTION", "off")
    code = main(["rm", "create", "--name", "nobase", "--all-traces", "--base-model",
                 "/nonexistent", "--wait", "--json"])
    captured = capsys.readouterr()
    model = last_json_of(captured.out)
    assert code == 1 and model["status"] == "failed"
    assert "/nonexistent" in model["error"]
    assert "Traceback" not in captured.err and "Stack Trace" not in captured.err, captured.err
    # The worker's phase line as it happens, then the step's failure: each one line.
    *_, failure = [line for line in captured.err.splitlines() if "error:" in line]
    assert failure.startswith('  error: Execution of step "personal_checkpoint" failed: job '
                              "failed in phase inputs: ModelLoadError: model ")


def test_an_unexpected_error_is_one_line_without_a_traceback(home, capsys,
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


def test_weights_while_the_object_store_is_down_says_so_in_one_line(home, capsys,
                                                                     monkeypatch, s3_settings,
                                                                     tmp_path):
    from dataclasses import replace

    from moto.server import ThreadedMotoServer

    from stash_pipeline.objects import S3ObjectStore
    from stash_pipeline.services import reward_models
    from stash_pipeline.store import Store
    from stash_pipeline_tests.support.api_helpers import succeed

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    settings = replace(s3_settings, endpoint=f"http://{host}:{port}")  # the same shared backend
    for name, value in (("S3_BUCKET", settings.bucket), ("S3_ACCESS_KEY", settings.access_key),
                        ("S3_SECRET_KEY", settings.secret_key), ("S3_REGION", settings.region),
                        ("S3_ENDPOINT", settings.endpoint)):
        monkeypatch.setenv(name, value)
    try:
        store = Store.from_env()
        model = reward_models.create(store, "local", {"name": "m",
                                                      "trace_ids": store.trace_ids()[:2]})
        succeed(store, S3ObjectStore(settings), model.id, tmp_path)
        store.dispose()
        assert main(["rm", "weights", model.id]) == 0
        capsys.readouterr()
    finally:
        server.stop()
    assert main(["rm", "weights", model.id]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: the object store is unavailable") and "try again" in line
