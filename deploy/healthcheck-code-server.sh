#!/bin/sh
# Health check of the code server (`stash-pipeline code-server`), for the container and whatever
# routes to it (an ECS task definition's healthCheck, a Kubernetes probe, docker's HEALTHCHECK):
# exits 0 when the server at HOST:PORT answers gRPC's health check and serves the pipeline's
# definitions, each within 10 s; else 1 with the reason on stderr. A server whose port listens but
# which answers nothing, or which failed to load the definitions, is unhealthy.
#   deploy/healthcheck-code-server.sh [HOST] [PORT]
# HOST defaults to 127.0.0.1 (the container itself), PORT to STASH_CODE_SERVER_PORT, else 4000.
exec stash-pipeline code-server-health --host "${1:-127.0.0.1}" \
    --port "${2:-${STASH_CODE_SERVER_PORT:-4000}}" --timeout-s 10
