"""Every deployment file loads through the schema its own tool checks it with."""

from __future__ import annotations

import ast
import importlib.util
import json
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from dagster._config import process_config
from dagster._core.instance.config import dagster_instance_config
from dagster._core.storage.compute_log_manager import ComputeIOType
from dagster._core.workspace.config_schema import ensure_workspace_config
from dagster._serdes.config_class import class_from_code_pointer
from packaging.requirements import Requirement

from stash_pipeline.cli import code_server
from stash_pipeline.defs import resources
from stash_pipeline.objects.s3 import S3ObjectStore

ROOT = Path(__file__).resolve().parents[1]
INSTANCE_FILES = [ROOT / "deploy" / "dagster.yaml",
                  ROOT / "stash_pipeline" / "dagster_local.yaml"]
ENV = {"DAGSTER_PG_USERNAME": "dagster", "DAGSTER_PG_PASSWORD": "secret",
       "DAGSTER_PG_HOST": "db.internal", "DAGSTER_PG_DB": "dagster", "S3_BUCKET": "checkpoints",
       "S3_REGION": "eu-west-1", "S3_ENDPOINT": "http://minio.internal:9000",
       "S3_ACCESS_KEY": "minio", "S3_SECRET_KEY": "minio-secret"}


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


# --- container definitions (no docker here: read statically) --------------------------------

ML_STACK = {"torch", "transformers", "datasets", "tokenizers", "safetensors"}
API_IMAGE = ROOT / "deploy" / "Dockerfile.api"
CODE_IMAGE = ROOT / "deploy" / "Dockerfile.code-location"


def dockerfile(path: Path) -> list[tuple[str, str]]:
    """(instruction, arguments) of each instruction, continuation lines joined."""
    text = re.sub(r"\\\n", " ", path.read_text())
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1].strip())
            for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def project_installs(path: Path) -> list[set[str]]:
    """The extras each `pip install` of the project (`.` or `".[a,b]"`) asks for, with each
    build argument at its default."""
    installs = []
    defaults: dict[str, str] = {}
    for instruction, arguments in dockerfile(path):
        if instruction == "ARG" and "=" in arguments:
            name, value = arguments.split("=", 1)
            defaults[name] = value
        if instruction != "RUN":
            continue
        arguments = re.sub(r"\$\{(\w+)\}", lambda m: defaults.get(m.group(1), m.group(0)),
                           arguments)
        for command in arguments.split("&&"):
            words = shlex.split(command)
            if words[:2] != ["pip", "install"]:
                continue
            targets = [w for w in words[2:] if not w.startswith("-") and w.startswith(".")]
            others = [w for w in words[2:] if not w.startswith(("-", ".", "http", "$"))]
            assert not others, f"{path.name} installs more than the project: {others}"
            for target in targets:
                match = re.fullmatch(r"\.(?:\[([\w,-]+)\])?", target)
                assert match, target
                installs.append(set(filter(None, (match.group(1) or "").split(","))))
    return installs


def requirements_with(extras: set[str]) -> set[str]:
    """Names of what installing the project with ``extras`` pulls in (its own extras followed)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names, pending = {Requirement(r).name for r in project["dependencies"]}, set(extras)
    seen: set[str] = set()
    while pending:
        extra = pending.pop()
        seen.add(extra)
        for line in project["optional-dependencies"][extra]:
            requirement = Requirement(line)
            if requirement.name == project["name"]:
                pending |= requirement.extras - seen
            else:
                names.add(requirement.name)
    return names


def dagster_home(path: Path) -> str:
    env = " ".join(arguments for instruction, arguments in dockerfile(path) if instruction == "ENV")
    return re.search(r"DAGSTER_HOME=(\S+)", env).group(1)


def test_the_api_image_installs_the_project_without_the_ml_stack() -> None:
    # The API records imports on the production instance.
    assert ("COPY", f"deploy/dagster.yaml {dagster_home(API_IMAGE)}/") in dockerfile(API_IMAGE)
    installs = project_installs(API_IMAGE)
    assert installs == [set()], installs
    assert not ML_STACK & requirements_with(set())
    assert ["stash-pipeline", "api", "--host", "0.0.0.0", "--port", "8000"] == json.loads(
        dict(dockerfile(API_IMAGE))["CMD"])


def test_the_api_runs_without_the_ml_stack_installed() -> None:
    """What the API image holds is enough for the API: its app, every route's schema and the CLI
    load with the ML packages unimportable (as if not installed)."""
    code = (
        "import sys\n"
        f"class Absent:\n"
        f"    def find_spec(self, name, path=None, target=None):\n"
        f"        if name.split('.')[0] in {sorted(ML_STACK)!r}:\n"
        f"            raise ImportError(f'{{name}} is not installed')\n"
        "sys.meta_path.insert(0, Absent())\n"
        "from stash_pipeline.api import create_app; create_app().openapi()\n"
        "from stash_pipeline.cli import build_parser; build_parser()\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_code_location_image_installs_the_worker_and_the_instance() -> None:
    instructions = dockerfile(CODE_IMAGE)
    assert project_installs(CODE_IMAGE) == [{"worker"}]
    assert ML_STACK <= requirements_with({"worker"})
    # The worker's pins are the Modal image's (deploy/requirements-worker.txt).
    modal = {Requirement(line).name: Requirement(line).specifier
             for line in (ROOT / "deploy" / "requirements-worker.txt").read_text().splitlines()
             if line.strip() and not line.startswith("#")}
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for line in project["optional-dependencies"]["worker"]:
        requirement = Requirement(line)
        assert modal[requirement.name] == requirement.specifier, line
    assert ["deploy/dagster.yaml", "deploy/workspace.yaml", f"{dagster_home(CODE_IMAGE)}/"] in [
        arguments.split() for instruction, arguments in instructions if instruction == "COPY"]
    command = json.loads(dict(instructions)["CMD"])
    assert command[:2] == ["stash-pipeline", "code-server"]
    port = command[command.index("--port") + 1]
    assert ("EXPOSE", port) in instructions
    # The health check a task definition or a probe runs, at the path the README gives.
    assert ["deploy/healthcheck-code-server.sh", "./deploy/"] in [
        arguments.split() for instruction, arguments in instructions if instruction == "COPY"]
    assert ("WORKDIR", "/opt/stash") in instructions
    check = ROOT / "deploy" / "healthcheck-code-server.sh"
    assert check.stat().st_mode & 0o111, "the health check is not executable"
    assert "stash-pipeline code-server-health" in check.read_text()
    assert f"STASH_CODE_SERVER_PORT:-{port}" in check.read_text()


@pytest.mark.parametrize("path", [API_IMAGE, CODE_IMAGE], ids=lambda p: p.name)
def test_images_copy_only_the_projects_own_files(path: Path) -> None:
    ignored = (ROOT / ".dockerignore").read_text()
    for instruction, arguments in dockerfile(path):
        if instruction == "COPY":
            *sources, _ = arguments.split()
            for source in sources:
                assert (ROOT / source).exists(), source
                assert f"!{source.split('/')[0]}" in ignored, f"{source} is left out of the build"


def test_every_variable_the_deployment_reads_is_documented() -> None:
    """Each `env:` of deploy/'s YAML files and each ENV of its images is a setting the README
    names (in its configuration table or the self-hosting section)."""
    readme = (ROOT / "README.md").read_text()
    names: set[str] = set()
    for path in (ROOT / "deploy" / "dagster.yaml", ROOT / "deploy" / "workspace.yaml"):
        names |= set(re.findall(r"\{\s*env:\s*(\w+)\s*\}", path.read_text()))
    for path in (API_IMAGE, CODE_IMAGE):
        for instruction, arguments in dockerfile(path):
            if instruction == "ENV":
                names |= set(re.findall(r"(\w+)=", arguments))
    assert {"S3_ENDPOINT", "STASH_CODE_SERVER_HOST", "DAGSTER_HOME"} <= names
    missing = sorted(name for name in names if f"`{name}`" not in readme)
    assert not missing, f"not in README.md: {missing}"
