"""Deploy both images to ECS: every process's task definition registered anew, every service moved
to it, and the runs the daemon launches from now on on the new code-location image.

    python deploy/ecs/deploy.py --cluster stash --api-image REPO/stash-api:TAG \\
        --code-image REPO/stash-code-location:TAG \\
        --env-file arn:aws:s3:::stash-config/stash.env \\
        --execution-role arn:aws:iam::ACCOUNT:role/stash-execution \\
        --task-role arn:aws:iam::ACCOUNT:role/stash-task --log-group /stash

``task-definitions.json`` beside this file holds each process's part (its container's name,
command, port, health check, size, and which image it runs); this script adds what they share:
the image, the settings file (``--env-file``, an S3 object in ``deploy/stash.env.example``'s
format: every process reads its variables from it), the roles, the log group, Fargate with
``awsvpc`` networking.

Runs follow the code server, not the daemon. The ``stash-run`` definition is registered first;
the code server's then carries its revision's ARN in ``DAGSTER_CONTAINER_CONTEXT`` (read by
``dagster api grpc``), and the daemon's ``EcsRunLauncher`` (deploy/dagster.yaml, no task
definition of its own) starts each run from the task definition its code location names. So a
new code server means new runs on the new image, and the daemon is never pinned to the revision
it saw when it started.

Services are updated in order, the code server first (the README's "Replacing a code server":
its service replaces the task, the daemon and webserver follow it by its stable name); a service
that does not exist in the cluster is skipped and named (the scoring server is optional).
``--dry-run`` prints the task definitions instead of registering anything. Uses boto3's usual
credentials and region (``AWS_REGION``, ``AWS_ENDPOINT_URL`` for a stand-in endpoint).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

TEMPLATES = Path(__file__).with_name("task-definitions.json")
RUN_FAMILY = "stash-run"
CODE_SERVER_FAMILY = "stash-code-server"
# Registered, then services updated, in this order (the run first: the code server names it).
ORDER = [RUN_FAMILY, CODE_SERVER_FAMILY, "stash-webserver", "stash-daemon", "stash-scoring",
         "stash-api"]


def templates() -> dict[str, dict[str, Any]]:
    return json.loads(TEMPLATES.read_text())


def task_definition(family: str, template: dict[str, Any], *, image: str, env_file: str,
                    execution_role: str, task_role: str, log_group: str, region: str,
                    environment: dict[str, str] | None = None) -> dict[str, Any]:
    """The ``register_task_definition`` arguments of one process."""
    container = {
        **template["container"],
        "image": image,
        "essential": True,
        "environmentFiles": [{"value": env_file, "type": "s3"}],
        "environment": [{"name": k, "value": v} for k, v in sorted((environment or {}).items())],
        "logConfiguration": {"logDriver": "awslogs", "options": {
            "awslogs-group": log_group, "awslogs-region": region,
            "awslogs-stream-prefix": family}},
    }
    return {"family": family, "networkMode": "awsvpc", "requiresCompatibilities": ["FARGATE"],
            "cpu": template["cpu"], "memory": template["memory"],
            "executionRoleArn": execution_role, "taskRoleArn": task_role,
            "containerDefinitions": [container]}


def code_server_environment(image: str, run_task_definition_arn: str) -> dict[str, str]:
    """What the code server tells Dagster about the runs it starts: their image, and the task
    definition revision the daemon's EcsRunLauncher runs them with."""
    context = {"ecs": {"task_definition_arn": run_task_definition_arn}}
    return {"DAGSTER_CURRENT_IMAGE": image, "DAGSTER_CONTAINER_CONTEXT": json.dumps(context)}


def deploy(args: argparse.Namespace, ecs: Any, out=sys.stdout) -> dict[str, str]:
    """Register every task definition and update the services; the registered ARNs by family."""
    shared = {"env_file": args.env_file, "execution_role": args.execution_role,
              "task_role": args.task_role, "log_group": args.log_group, "region": args.region}
    images = {"api": args.api_image, "code-location": args.code_image}
    found = templates()
    registered: dict[str, str] = {}
    for family in ORDER:
        template = found[family]
        image = images[template["image"]]
        environment = (code_server_environment(image, registered[RUN_FAMILY])
                       if family == CODE_SERVER_FAMILY else None)
        definition = task_definition(family, template, image=image, environment=environment,
                                     **shared)
        if args.dry_run:
            print(json.dumps(definition, indent=2), file=out)
            registered[family] = f"{family}:NEW"
            continue
        answer = ecs.register_task_definition(**definition)
        registered[family] = answer["taskDefinition"]["taskDefinitionArn"]
        print(f"registered {registered[family]}", file=out)
    if args.dry_run:
        return registered
    services = [f for f in ORDER if f != RUN_FAMILY]
    existing = {s["serviceName"] for s in ecs.describe_services(
        cluster=args.cluster, services=services)["services"] if s.get("status") == "ACTIVE"}
    for family in services:
        if family not in existing:
            print(f"skipped service {family}: not in cluster {args.cluster}", file=out)
            continue
        ecs.update_service(cluster=args.cluster, service=family,
                           taskDefinition=registered[family])
        print(f"updated service {family} to {registered[family]}", file=out)
    return registered


def parser() -> argparse.ArgumentParser:
    made = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    made.add_argument("--cluster", required=True)
    made.add_argument("--api-image", required=True, help="deploy/Dockerfile.api, pushed")
    made.add_argument("--code-image", required=True,
                      help="deploy/Dockerfile.code-location, pushed")
    made.add_argument("--env-file", required=True,
                      help="the settings file's S3 ARN (arn:aws:s3:::BUCKET/KEY)")
    made.add_argument("--execution-role", required=True,
                      help="role ECS pulls images, reads the env file and writes logs with")
    made.add_argument("--task-role", required=True,
                      help="role of the processes (the daemon's starts ECS tasks)")
    made.add_argument("--log-group", required=True)
    made.add_argument("--region", default=None, help="default: boto3's (AWS_REGION)")
    made.add_argument("--dry-run", action="store_true",
                      help="print the task definitions; register and update nothing")
    return made


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if not args.env_file.startswith("arn:aws:s3:::"):
        print(f"error: --env-file must be an S3 object's ARN (arn:aws:s3:::BUCKET/KEY), got "
              f"{args.env_file!r}", file=sys.stderr)
        return 2
    import boto3

    ecs = boto3.client("ecs", region_name=args.region)
    args.region = args.region or ecs.meta.region_name
    deploy(args, ecs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
