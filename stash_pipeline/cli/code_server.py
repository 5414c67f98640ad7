"""`stash-pipeline code-server`: the pipeline's code location as a Dagster gRPC server that stops
on SIGTERM; `stash-pipeline code-server-health`: whether one serves.

The webserver and the daemon reach it through deploy/workspace.yaml's ``grpc_server`` entry.
Dagster's server maps SIGTERM to whatever SIGINT does in its process; a process started with SIGINT
ignored (a shell's background job, some service managers) would then ignore SIGTERM too, and an
old code server would keep serving beside its replacement (gRPC binds its port with SO_REUSEPORT,
so both listen on it). This command puts both signals back at their defaults and becomes
``dagster api grpc`` on the project's definitions (``exec``: the same process id, one process).

It holds no runs: the instance's run launcher starts each run outside it (ECS tasks in
deploy/dagster.yaml, processes of the daemon with ``stash_pipeline.run_launcher``), so SIGTERM
stops it within seconds whatever runs. A run's command is this server's interpreter
(``--use-python-environment-entry-point``): a new server from another environment runs the next
runs with its own.

The health check (deploy/healthcheck-code-server.sh, a container's or a load balancer's) asks
gRPC's health service and then for the definitions, each with a deadline: a server whose port
listens but which answers nothing, or which failed to load the definitions, is unhealthy
(``dagster api grpc-health-check`` waits without a deadline and asks only the first).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

DEFINITIONS_MODULE = "stash_pipeline.definitions"
LOCATION_NAME = "stash_pipeline"
DEFAULT_PORT = 4000
HEALTH_TIMEOUT_S = 10


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "code-server", help="serve the pipeline's definitions to dagster-webserver and "
                            "dagster-daemon (gRPC; stops on SIGTERM)",
        description="Runs `dagster api grpc` on stash_pipeline.definitions (location "
                    f"{LOCATION_NAME}), with SIGINT and SIGTERM at their defaults so that SIGTERM "
                    "stops it even when it was started with SIGINT ignored. deploy/workspace.yaml "
                    "points the webserver and the daemon at it.")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default 127.0.0.1; 0.0.0.0 in a container)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT,
                        help=f"port (default {DEFAULT_PORT})")
    parser.set_defaults(handler=run)
    health = commands.add_parser(
        "code-server-health", help="exit 0 when a code server serves the pipeline's definitions",
        description="Asks a code server (stash-pipeline code-server) for gRPC's health status "
                    "and its definitions, each within --timeout-s; exits 0 when it serves them, "
                    "else 1 with the reason. deploy/healthcheck-code-server.sh runs it.")
    health.add_argument("--host", default="127.0.0.1", help="its address (default 127.0.0.1)")
    health.add_argument("--port", type=int, default=DEFAULT_PORT,
                        help=f"its port (default {DEFAULT_PORT})")
    health.add_argument("--timeout-s", type=float, default=HEALTH_TIMEOUT_S,
                        help=f"how long each answer may take (default {HEALTH_TIMEOUT_S})")
    health.set_defaults(handler=check_health)


def code_server_command(host: str, port: int) -> list[str]:
    return [sys.executable, "-m", "dagster", "api", "grpc", "--module-name", DEFINITIONS_MODULE,
            "--location-name", LOCATION_NAME, "--use-python-environment-entry-point",
            "--host", host, "--port", str(port)]


def run(args: argparse.Namespace) -> int:
    # Ignored signals stay ignored across exec; defaults let the new interpreter install its
    # KeyboardInterrupt handler, which Dagster's server then also gives SIGTERM.
    for number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(number, signal.SIG_DFL)
    command = code_server_command(args.host, args.port)
    sys.stdout.flush()
    os.execv(command[0], command)
    return 0  # not reached: exec replaces this process


def check_health(args: argparse.Namespace) -> int:
    from stash_pipeline.cli import pipeline

    try:
        print(pipeline.served_definitions(args.host, args.port, args.timeout_s))
    except pipeline.CodeServerUnhealthy as error:
        print(error, file=sys.stderr)
        return 1
    return 0
