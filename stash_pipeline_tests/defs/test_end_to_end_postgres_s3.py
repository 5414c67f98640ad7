"""The deployment's shape end to end: PostgreSQL, S3 (moto's server on loopback), real traces.

Import the AgentProcessBench traces, train a personal model on a tiny base model through the
pipeline, download the archive through its presigned URL as the owner would, load it with
RewardModel, and find the scores the pipeline stored.
"""

from __future__ import annotations

import itertools
import tarfile
import urllib.parse
import urllib.request

import dagster as dg
import pytest

from stash_pipeline.dagster_runs.in_process import run_sensor_requests
from stash_pipeline.dagster_runs.instance import definitions
from stash_pipeline.importers import read_path
from stash_pipeline.objects import object_store_from_env
from stash_pipeline.services import reward_models
from stash_pipeline.store import Store, schema
from stash_pipeline_tests.support.object_helpers import s3_environ
from stash_pipeline_tests.support.tiny_models import AGENTPROCESSBENCH

# The worker as its own process, as deployed: the Pipes protocol between two processes.
pytestmark = [pytest.mark.postgres, pytest.mark.slow, pytest.mark.worker_process]
ANA_TRACES = 40


@pytest.fixture
def deployment(home, postgres_store: Store, s3_settings, monkeypatch) -> Store:
    monkeypatch.setenv("DATABASE_URL", postgres_store.url)
    for name, value in s3_environ(s3_settings).items():
        monkeypatch.setenv(name, value)
    with postgres_store.transaction() as connection:
        for table in reversed(schema.metadata.sorted_tables):
            connection.execute(table.delete())
    return postgres_store


def test_agentprocessbench_to_a_downloaded_checkpoint(deployment, instance, pipeline_base_model,
                                                      tmp_path):
    from stash_pipeline.worker.scoring import RewardModel

    store = deployment
    # The whole file, 40 traces of it ana's: her model scores every trace she owns, and 40 show
    # what 250 would at a sixth of the worker's time.
    ana = list(itertools.islice(read_path(AGENTPROCESSBENCH, owner="ana"), ANA_TRACES))
    others = itertools.islice(read_path(AGENTPROCESSBENCH, owner="bob"), ANA_TRACES, None)
    summary = store.import_traces([*ana, *others])
    assert summary.imported == 250 and len(store.trace_ids(owner="ana")) == ANA_TRACES
    selected = store.trace_ids(owner="ana")[:24]
    model = reward_models.create(store, "ana", {"name": "hotpot", "trace_ids": selected,
                                                "base_model": str(pipeline_base_model),
                                                "max_pairs": 120})
    [run] = run_sensor_requests(instance, definitions(), "queued_reward_models")
    assert run.status == dg.DagsterRunStatus.SUCCESS
    done = store.get_reward_model(model.id)
    assert done.status == "succeeded", done.error
    assert done.metrics["train_pairs"] + done.metrics["eval_pairs"] <= 120

    url = reward_models.weights_url(store, object_store_from_env(), "ana", model.id)
    query = urllib.parse.parse_qs(urllib.parse.urlparse(url).query)
    assert query["X-Amz-Expires"] == ["300"]
    archive = tmp_path / "reward-model.tar.gz"
    with urllib.request.urlopen(url) as response:
        archive.write_bytes(response.read())
    with tarfile.open(archive) as tar:
        tar.extractall(tmp_path, filter="data")

    loaded = RewardModel(tmp_path / "reward-model")
    sample = store.get_traces(store.trace_ids(owner="ana")[-5:])  # never selected for training
    stored = {s.trace_id: s for t in sample for s in store.scores_for(t.id)
              if s.evaluator == model.id}
    for trace, raw in zip(sample, loaded.score_traces(sample)):
        assert raw == pytest.approx(stored[trace.id].raw, abs=1e-4)
        assert loaded.calibrated(raw) == pytest.approx(stored[trace.id].calibrated, abs=1e-4)
    actions = loaded.score_actions(sample[:2])
    for trace in sample[:2]:
        for action in store.action_scores_for(trace.id, model.id):
            assert actions[action.action_id] == pytest.approx(action.raw, abs=1e-4)
            assert loaded.credit(actions[action.action_id]) == pytest.approx(action.credit,
                                                                             abs=1e-4)
