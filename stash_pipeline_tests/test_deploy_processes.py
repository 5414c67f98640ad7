"""The deployments of the README's processes, read statically (no docker, cluster or AWS here):
ECS (deploy/ecs: task definitions and the deploy script, run against moto's ECS) and Kubernetes
(deploy/helm: Dagster's chart's values and the API's and scoring server's manifests). Each process
runs the README's command on its image with every variable it needs, and each health check runs a
command or asks a route that exists."""

from __future__ import annotations

import inspect
import io
import json
import re
import shlex
import tomllib
from pathlib import Path

import boto3
import pytest
import yaml
from dagster._cli.api import api_cli
from dagster._daemon.cli import create_dagster_daemon_cli
from dagster_aws.ecs.container_context import EcsContainerContext
from dagster_webserver.webserver import DagsterWebserver
from packaging.requirements import Requirement

from stash_pipeline.api import create_app as create_api
from stash_pipeline.cli import code_server
from stash_pipeline.objects.env import S3_VARIABLES
from stash_pipeline.serving.server import ServeSettings, create_app as create_scoring_server
from stash_pipeline_tests.support.benchmarks import module_from_file

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
ECS = json.loads((DEPLOY / "ecs" / "task-definitions.json").read_text())
VALUES = yaml.safe_load((DEPLOY / "helm" / "values.yaml").read_text())
SERVICES = list(yaml.safe_load_all((DEPLOY / "helm" / "services.yaml").read_text()))
INSTANCE = yaml.safe_load((DEPLOY / "dagster.yaml").read_text())
# The README's processes, and what runs each on ECS and on Kubernetes.
FAMILIES = {"API": "stash-api", "code server": "stash-code-server",
            "dagster-webserver": "stash-webserver", "dagster-daemon": "stash-daemon",
            "scoring server": "stash-scoring", "run tasks": "stash-run"}
MANIFESTS = {"API": "stash-api", "scoring server": "stash-scoring"}
ENV_SECRET = "stash-env"


def readme_processes() -> dict[str, dict]:
    """The README's process table: each process's command (words), image and needed
    variables, with `S3_*` and `DAGSTER_PG_*` spelled out and "the webserver's" followed."""
    section = (ROOT / "README.md").read_text().split("### Processes", 1)[1].split("\n\n", 2)[1]
    rows = [[cell.strip() for cell in line.strip("|").split("|")]
            for line in section.splitlines()[2:] if line.startswith("|")]
    processes: dict[str, dict] = {}
    for name, command, image, needs, _optional in rows:
        key = re.sub(r"\s*\(.*", "", name)
        commands = re.findall(r"`([^`]+)`", command)
        variables: set[str] = set()
        for token in re.findall(r"`([A-Z0-9_*]+)`", needs):
            variables |= {"S3_*": set(S3_VARIABLES), "DAGSTER_PG_*": dagster_pg()}.get(
                token, {token})
        for other, owner in (("the webserver's", "dagster-webserver"),
                             ("the code server's", "code server")):
            if other in needs:
                variables |= processes[owner]["needs"]
        processes[key] = {"command": shlex.split(commands[0]) if commands else None,
                          "image": image, "needs": variables}
    return processes


def dagster_pg() -> set[str]:
    return {value["env"] for value in INSTANCE["storage"]["postgres"]["postgres_db"].values()
            if isinstance(value, dict)}


def env_file_names() -> set[str]:
    lines = (DEPLOY / "stash.env.example").read_text().splitlines()
    return {line.split("=", 1)[0] for line in lines if "=" in line and not line.startswith("#")}


def deploy_script():
    return module_from_file(DEPLOY / "ecs" / "deploy.py", "stash_deploy_ecs")


def test_the_readme_names_every_process_that_ecs_and_kubernetes_run() -> None:
    assert set(readme_processes()) == set(FAMILIES)
    assert set(ECS) == set(FAMILIES.values()) == set(deploy_script().ORDER)


@pytest.mark.parametrize("process", sorted(FAMILIES))
def test_each_ecs_task_runs_the_readmes_command_on_its_image(process: str) -> None:
    documented = readme_processes()[process]
    template = ECS[FAMILIES[process]]
    assert template["image"] == documented["image"]
    # A run's command is the launcher's (`dagster api execute_run`); its container is the one
    # deploy/dagster.yaml's launcher names.
    if process == "run tasks":
        assert template["container"]["name"] == INSTANCE["run_launcher"]["config"][
            "container_name"]
        assert "command" not in template["container"]
    else:
        assert template["container"]["command"] == documented["command"]


def test_every_process_reads_every_variable_it_needs_from_the_settings_file() -> None:
    """The settings file names what each process needs (README); every ECS task reads it and
    every Kubernetes container reads the Secret made from it. The variables Dagster's own files
    read are among what each Dagster process needs."""
    processes = readme_processes()
    names = env_file_names()
    for process, documented in processes.items():
        assert documented["needs"], process
        assert documented["needs"] <= names, (process, documented["needs"] - names)
    read_by_instance = set(re.findall(r"\{\s*env:\s*(\w+)\s*\}",
                                      (DEPLOY / "dagster.yaml").read_text()))
    read_by_workspace = set(re.findall(r"\{\s*env:\s*(\w+)\s*\}",
                                       (DEPLOY / "workspace.yaml").read_text()))
    for process in ("API", "code server", "dagster-webserver", "dagster-daemon", "run tasks"):
        assert read_by_instance <= processes[process]["needs"], process
    for process in ("dagster-webserver", "dagster-daemon"):
        assert read_by_workspace <= processes[process]["needs"], process

    script = deploy_script()
    for family, template in ECS.items():
        rendered = script.task_definition(family, template, image="i", env_file="arn:aws:s3:::b/k",
                                          execution_role="e", task_role="t", log_group="g",
                                          region="r")
        [container] = rendered["containerDefinitions"]
        assert container["environmentFiles"] == [{"value": "arn:aws:s3:::b/k", "type": "s3"}]
    secret = [{"name": ENV_SECRET}]
    [user] = VALUES["dagster-user-deployments"]["deployments"]
    for component in (user, VALUES["dagsterWebserver"], VALUES["dagsterDaemon"],
                      VALUES["runLauncher"]["config"]["k8sRunLauncher"]):
        assert component["envSecrets"] == secret
    for container in manifest_containers().values():
        assert container["envFrom"] == [{"secretRef": {"name": ENV_SECRET}}]


def manifest_containers() -> dict[str, dict]:
    return {d["metadata"]["name"]: d["spec"]["template"]["spec"]["containers"][0]
            for d in SERVICES if d["kind"] == "Deployment"}


def option(command: list[str], *names: str) -> str:
    for name in names:
        if name in command:
            return command[command.index(name) + 1]
    raise AssertionError(f"{command} has none of {names}")


def http_check(check: list[str]) -> tuple[int, str]:
    """The port and path a `python -c "urllib.request.urlopen(URL)"` health check asks."""
    assert check[:3] == ["CMD", "python", "-c"], check
    port, path = re.search(r"urlopen\('http://127\.0\.0\.1:(\d+)(/[\w/]*)'", check[3]).groups()
    return int(port), path


def routes(app) -> set[str]:
    return set(app.openapi()["paths"])


def test_ecs_health_checks_ask_routes_and_run_commands_that_exist() -> None:
    api = ECS["stash-api"]["container"]
    assert http_check(api["healthCheck"]["command"]) == (int(option(api["command"], "--port")),
                                                         "/health")
    assert "/health" in routes(create_api())
    scoring = ECS["stash-scoring"]["container"]
    assert http_check(scoring["healthCheck"]["command"]) == (
        int(option(scoring["command"], "--port")), "/health")
    assert "/health" in routes(create_scoring_server(None, None, ServeSettings(token="t")))
    webserver = ECS["stash-webserver"]["container"]
    assert http_check(webserver["healthCheck"]["command"]) == (
        int(option(webserver["command"], "-p")), "/server_info")
    assert 'Route("/server_info"' in inspect.getsource(DagsterWebserver.build_routes)

    server = ECS["stash-code-server"]["container"]
    check = server["healthCheck"]["command"]
    # The project's check (a deadline, the definitions served), where the image copies it.
    assert check[:2] == ["CMD", "/opt/stash/deploy/healthcheck-code-server.sh"]
    assert "COPY deploy/healthcheck-code-server.sh ./deploy/" in (
        DEPLOY / "Dockerfile.code-location").read_text()
    assert "WORKDIR /opt/stash" in (DEPLOY / "Dockerfile.code-location").read_text()
    assert int(check[3]) == int(option(server["command"], "--port"))
    daemon = ECS["stash-daemon"]["container"]["healthCheck"]["command"]
    assert daemon[:2] == ["CMD", "dagster-daemon"]
    assert daemon[2] in create_dagster_daemon_cli().commands
    assert "healthCheck" not in ECS["stash-run"]["container"]  # a batch task


def test_kubernetes_probes_ask_routes_and_run_commands_that_exist() -> None:
    [user] = VALUES["dagster-user-deployments"]["deployments"]
    # The chart runs `dagster api grpc -h 0.0.0.0 -p PORT ARGS` and probes it with
    # `dagster api grpc-health-check -p PORT`: every probe enabled, none replacing the command.
    grpc = code_server.code_server_command("0.0.0.0", user["port"])
    assert grpc[grpc.index("grpc") + 1:] == [*user["dagsterApiGrpcArgs"], "--host", "0.0.0.0",
                                            "--port", str(user["port"])]
    assert user["readinessProbe"]["enabled"] and user["startupProbe"]["enabled"]
    assert user["livenessProbe"] and not any("exec" in user[probe] for probe in (
        "readinessProbe", "startupProbe", "livenessProbe"))
    health_check = api_cli.commands["grpc-health-check"]
    assert health_check.make_context("grpc-health-check", ["-p", str(user["port"])]).params[
        "port"] == user["port"]
    webserver = VALUES["dagsterWebserver"]
    for probe in ("readinessProbe", "livenessProbe"):
        assert webserver[probe]["httpGet"] == {"path": "/server_info",
                                               "port": webserver["service"]["port"]}
    assert VALUES["dagsterDaemon"]["livenessProbe"]["exec"]["command"] == [
        "dagster-daemon", "liveness-check"]
    processes = readme_processes()
    containers = manifest_containers()
    for process, name in MANIFESTS.items():
        container = containers[name]
        assert container["command"] == processes[process]["command"]
        port = int(option(container["command"], "--port"))
        assert container["ports"] == [{"containerPort": port}]
        for probe in ("readinessProbe", "livenessProbe"):
            assert container[probe]["httpGet"] == {"path": "/health", "port": port}
    assert containers["stash-api"]["image"].rsplit(":", 1)[0].endswith("/stash-api")


def test_kubernetes_runs_every_dagster_process_on_the_one_image_with_the_instances_settings():
    [user] = VALUES["dagster-user-deployments"]["deployments"]
    repository = user["image"]["repository"]
    assert VALUES["dagsterWebserver"]["image"]["repository"] == repository
    assert VALUES["dagsterDaemon"]["image"]["repository"] == repository
    assert manifest_containers()["stash-scoring"]["image"].rsplit(":", 1)[0] == repository
    assert user["includeConfigInLaunchedRuns"] == {"enabled": True}
    assert VALUES["runLauncher"]["type"] == "K8sRunLauncher"
    coordinator = VALUES["dagsterDaemon"]["runCoordinator"]
    assert coordinator["type"] == "CustomRunCoordinator"
    custom = coordinator["config"]["customRunCoordinator"]
    assert custom["module"] == INSTANCE["run_coordinator"]["module"]
    assert custom["class"] == INSTANCE["run_coordinator"]["class"]
    assert custom["config"] == INSTANCE["run_coordinator"]["config"]
    logs = VALUES["computeLogManager"]["config"]["customComputeLogManager"]
    assert logs == {key: INSTANCE["compute_logs"][key] for key in ("module", "class", "config")}
    concurrency = VALUES["concurrency"]
    assert concurrency["pools"]["defaultLimit"] == INSTANCE["concurrency"]["pools"][
        "default_limit"]
    assert concurrency["runs"]["maxConcurrentRuns"] == INSTANCE["concurrency"]["runs"][
        "max_concurrent_runs"]
    postgres = VALUES["postgresql"]
    assert postgres["enabled"] is False
    assert postgres["postgresqlScheme"] == INSTANCE["storage"]["postgres"]["postgres_db"][
        "scheme"]
    # Keys of the chart's values (dagster/dagster 1.13's schema): a misspelt one would be ignored.
    assert set(VALUES) <= {
        "dagsterWebserver", "dagster-user-deployments", "postgresql", "rabbitmq", "redis",
        "generatePostgresqlPasswordSecret", "generateCeleryConfigSecret", "flower", "ingress",
        "imagePullSecrets", "computeLogManager", "scheduler", "runLauncher", "pythonLogs",
        "dagsterDaemon", "busybox", "migrate", "telemetry", "serviceAccount", "global",
        "retention", "concurrency", "additionalInstanceConfig"}
    # The images carry Dagster's K8sRunLauncher with the `k8s` extra, at the integrations' version.
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    [k8s] = [Requirement(r) for r in project["optional-dependencies"]["k8s"]]
    [aws] = [Requirement(r) for r in project["dependencies"] if r.startswith("dagster-aws")]
    assert k8s.name == "dagster-k8s" and k8s.specifier == aws.specifier


def test_the_daemon_pins_no_task_definition_runs_take_their_code_servers() -> None:
    config = INSTANCE["run_launcher"]["config"]
    assert "task_definition" not in config
    assert config["secrets_tag"] is None  # a run's settings come with its task definition


@pytest.fixture
def ecs(s3_endpoint: str, monkeypatch: pytest.MonkeyPatch):
    """moto's ECS (the suite's loopback moto server) with a cluster whose services run the
    first revision of each process's task definition; the scoring server's service absent."""
    for name, value in (("AWS_ENDPOINT_URL", s3_endpoint), ("AWS_ACCESS_KEY_ID", "test"),
                        ("AWS_SECRET_ACCESS_KEY", "test"), ("AWS_DEFAULT_REGION", "eu-west-1")):
        monkeypatch.setenv(name, value)
    client = boto3.client("ecs")
    cluster = f"stash-{id(client)}"
    client.create_cluster(clusterName=cluster)
    for family in ECS:
        if family in ("stash-run", "stash-scoring"):
            continue
        first = client.register_task_definition(
            family=family, cpu="256", memory="512", requiresCompatibilities=["FARGATE"],
            networkMode="awsvpc", containerDefinitions=[{"name": "old", "image": "old:0"}])
        client.create_service(cluster=cluster, serviceName=family, desiredCount=1,
                              taskDefinition=first["taskDefinition"]["taskDefinitionArn"])
    return client, cluster


def deploy_with(ecs, tag: str) -> str:
    client, cluster = ecs
    out = io.StringIO()
    script = deploy_script()
    args = script.parser().parse_args([
        "--cluster", cluster, "--api-image", f"registry/stash-api:{tag}",
        "--code-image", f"registry/stash-code-location:{tag}",
        "--env-file", "arn:aws:s3:::config/stash.env", "--execution-role",
        "arn:aws:iam::123456789012:role/stash-execution", "--task-role",
        "arn:aws:iam::123456789012:role/stash-task", "--log-group", "/stash",
        "--region", "eu-west-1"])
    script.deploy(args, client, out=out)
    return out.getvalue()


def test_a_deploy_moves_every_service_and_the_code_servers_runs_to_the_new_image(ecs) -> None:
    client, cluster = ecs
    deploy_with(ecs, "v1")
    said = deploy_with(ecs, "v2")
    assert "skipped service stash-scoring: not in cluster" in said

    def current(family: str) -> dict:
        [service] = client.describe_services(cluster=cluster, services=[family])["services"]
        return client.describe_task_definition(
            taskDefinition=service["taskDefinition"])["taskDefinition"]

    for family in ("stash-api", "stash-code-server", "stash-webserver", "stash-daemon"):
        [container] = current(family)["containerDefinitions"]
        image = "stash-api" if family == "stash-api" else "stash-code-location"
        assert container["image"] == f"registry/{image}:v2", family
        assert f"updated service {family} to " in said
    [server] = current("stash-code-server")["containerDefinitions"]
    environment = {e["name"]: e["value"] for e in server["environment"]}
    assert environment["DAGSTER_CURRENT_IMAGE"] == "registry/stash-code-location:v2"
    # What the daemon's EcsRunLauncher makes of it (dagster_aws's own merge): no task definition
    # of its own, so a run takes the one its code server names, this deploy's.
    launcher = EcsContainerContext(task_definition_arn=INSTANCE["run_launcher"]["config"].get(
        "task_definition"))
    context = launcher.merge(EcsContainerContext.create_from_config(
        json.loads(environment["DAGSTER_CONTAINER_CONTEXT"])))
    run = client.describe_task_definition(
        taskDefinition=context.task_definition_arn)["taskDefinition"]
    assert run["family"] == "stash-run" and run["revision"] == 2
    [container] = run["containerDefinitions"]
    assert container["image"] == "registry/stash-code-location:v2"
    assert container["name"] == INSTANCE["run_launcher"]["config"]["container_name"]


def test_a_deploy_without_an_s3_settings_file_is_refused_in_one_line(capsys) -> None:
    assert deploy_script().main([
        "--cluster", "c", "--api-image", "a", "--code-image", "c", "--env-file", "stash.env",
        "--execution-role", "e", "--task-role", "t", "--log-group", "g"]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: --env-file must be an S3 object's ARN")
