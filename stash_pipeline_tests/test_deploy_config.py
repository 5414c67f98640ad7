"""Every deployment file loads through the schema its own tool checks it with."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest
import yaml
from dagster._config import process_config
from dagster._core.instance.config import dagster_instance_config
from dagster._core.storage.compute_log_manager import ComputeIOType
from dagster._core.workspace.config_schema import ensure_workspace_config
from dagster._serdes.config_class import class_from_code_pointer

from stash_pipeline.cli import code_server
from stash_pipeline.defs import resources
from stash_pipeline.objects.s3 import S3ObjectStore

ROOT = Path(__file__).resolve().parents[1]
INSTANCE_FILES = [ROOT / "deploy" / "dagster.yaml",
                  ROOT / "stash_pipeline" / "dagster_local.yaml"]
ENV = {"DAGSTER_PG_USERNAME": "dagster", "DAGSTER_PG_PASSWORD": "secret",
       "DAGSTER_PG_HOST": "db.internal", "DAGSTER_PG_DB": "dagster", "S3_BUCKET": "checkpoints",
       "S3_REGION": "eu-west-1", "S3_ENDPOINT": "http://minio.internal:9000",
       "S3_ACCESS_KEY": "minio", "S3_SECRET_KEY": "minio-secret",
       "STASH_ECS_TASK_DEFINITION": "stash-pipeline:7"}


@pytest.mark.parametrize("path", INSTANCE_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_instance_config_passes_dagsters_schema(path: Path, monkeypatch) -> None:
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    config, _ = dagster_instance_config(str(path.parent), path.name)
    assert config["concurrency"]["pools"]["default_limit"] == 1
    assert config["run_monitoring"]["enabled"] is True
    assert config["nux"] == {"enabled": False}  # no first-visit dialog over the UI
    # Each pluggable class, with its own config schema (env values resolved as Dagster does).
    for section in ("run_coordinator", "run_launcher", "compute_logs"):
        if section not in config:
            continue
        data = config[section]
        cls = class_from_code_pointer(data["module"], data["class"])
        checked = process_config(cls.config_type(), data.get("config") or {})
        assert checked.success, checked.errors


def test_production_storage_uses_psycopg2_for_dagster_itself() -> None:
    storage = yaml.safe_load((ROOT / "deploy" / "dagster.yaml").read_text())["storage"]
    assert storage["postgres"]["postgres_db"]["scheme"] == "postgresql+psycopg2"


def test_workspace_loads_the_project_definitions_from_its_code_server(monkeypatch) -> None:
    """The webserver and the daemon reach the code server `stash-pipeline code-server` starts,
    under the location name it serves and the dev workspace gives."""
    monkeypatch.setenv("STASH_CODE_SERVER_HOST", "code-server")
    monkeypatch.setenv("STASH_CODE_SERVER_PORT", "4000")
    path = ROOT / "deploy" / "workspace.yaml"
    config = ensure_workspace_config(yaml.safe_load(path.read_text()), str(path))
    [location] = config["load_from"]
    server = location["grpc_server"]
    assert server["location_name"] == code_server.LOCATION_NAME
    assert (server["host"], server["port"]) == ("code-server", 4000)
    assert "--module-name" in code_server.code_server_command("0.0.0.0", 4000)
    assert code_server.DEFINITIONS_MODULE == "stash_pipeline.definitions"
    [dev] = yaml.safe_load((ROOT / "workspace.yaml").read_text())["load_from"]
    assert dev["python_module"] == {"module_name": code_server.DEFINITIONS_MODULE,
                                    "location_name": code_server.LOCATION_NAME}


def test_modal_app_takes_the_names_the_pipeline_calls_from_their_one_owner() -> None:
    """deploy/modal_app.py names its app and function with compute.remote's constants, which
    defs/resources.py looks the function up by."""
    from stash_pipeline.compute import remote

    tree = ast.parse((ROOT / "deploy" / "modal_app.py").read_text())
    imported = {alias.name for node in tree.body if isinstance(node, ast.ImportFrom)
                and node.module == "stash_pipeline.compute.remote" for alias in node.names}
    assert {"MODAL_APP", "MODAL_FUNCTION"} <= imported
    calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call)
             and isinstance(node.func, ast.Attribute)]
    [app] = [c for c in calls if c.func.attr == "App"]
    [function] = [c for c in calls if c.func.attr == "function"]
    assert isinstance(app.args[0], ast.Name) and app.args[0].id == "MODAL_APP"
    name = next(k.value for k in function.keywords if k.arg == "name")
    assert isinstance(name, ast.Name) and name.id == "MODAL_FUNCTION"
    assert (resources.MODAL_APP, resources.MODAL_FUNCTION) == \
        (remote.MODAL_APP, remote.MODAL_FUNCTION) == ("stash-reward-worker", "run_reward_job")
    constants = {node.targets[0].id: ast.literal_eval(node.value) for node in tree.body
                 if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
                 and isinstance(node.value, ast.Constant)}
    assert constants["GPU"] == "A10G"
    assert importlib.util.find_spec("modal") is not None


def instance_config(path: Path) -> dict:
    config, _ = dagster_instance_config(str(path.parent), path.name)
    return config


def test_step_logs_go_to_the_projects_s3_endpoint_with_its_keys(s3_settings, tmp_path,
                                                                 monkeypatch) -> None:
    """deploy/dagster.yaml's compute-log manager, built as the daemon builds it from S3_* only
    (no AWS_* variable, no ~/.aws), uploads a step's log to the project's endpoint (moto here)."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                 "AWS_DEFAULT_REGION", "AWS_REGION", "AWS_ENDPOINT_URL", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("S3_BUCKET", s3_settings.bucket)
    monkeypatch.setenv("S3_REGION", s3_settings.region)
    monkeypatch.setenv("S3_ENDPOINT", s3_settings.endpoint)
    monkeypatch.setenv("S3_ACCESS_KEY", s3_settings.access_key)
    monkeypatch.setenv("S3_SECRET_KEY", s3_settings.secret_key)
    data = instance_config(ROOT / "deploy" / "dagster.yaml")["compute_logs"]
    cls = class_from_code_pointer(data["module"], data["class"])
    checked = process_config(cls.config_type(), {**data["config"], "local_dir": str(tmp_path)})
    assert checked.success, checked.errors
    manager = cls.from_config_value(None, checked.value)

    log_key = ["run-1", "compute_logs", "step"]
    local = Path(manager.local_manager.get_captured_local_path(log_key, "out"))
    local.parent.mkdir(parents=True, exist_ok=True)
    local.write_text("phase scoring done in 1.0 s\n")
    manager.upload_to_cloud_storage(log_key, ComputeIOType.STDOUT)

    stored = S3ObjectStore(s3_settings).client.get_object(
        Bucket=s3_settings.bucket, Key="dagster-compute-logs/storage/run-1/compute_logs/step.out")
    assert stored["Body"].read() == b"phase scoring done in 1.0 s\n"
    assert manager.cloud_storage_has_logs(log_key, ComputeIOType.STDOUT)


def test_the_deployment_reads_the_s3_variables_the_project_reads() -> None:
    """Every S3 setting the project reads (objects.env) is what deploy/dagster.yaml's step logs
    read, and nothing else: one set of variables for the checkpoints and the logs."""
    from stash_pipeline.objects.env import S3_VARIABLES

    logs = yaml.safe_load((ROOT / "deploy" / "dagster.yaml").read_text())["compute_logs"]
    read = {value["env"] for value in logs["config"].values()
            if isinstance(value, dict) and "env" in value}
    assert read == set(S3_VARIABLES)
