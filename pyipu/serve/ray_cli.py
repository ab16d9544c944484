"""`pyipu serve --ray MODEL_REPOSITORY`: deploy the repository on a Ray cluster through Ray
Serve, serve until SIGTERM or SIGINT, then delete the application."""

from __future__ import annotations

import argparse
import json
import socket
import sys
from typing import Any

from pyipu.errors import ConfigError
from pyipu.serve.cli import stop_signals
from pyipu.serve.ray import RayServeConfig, build, deploy, import_serve

APP = "pyipu"  # the Ray Serve application's name


def _autoscaling(text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise ConfigError(f"--autoscaling is not valid JSON: {e}") from e
    if not isinstance(doc, dict):
        raise ConfigError("--autoscaling must be a JSON object (Ray Serve's autoscaling_config)")
    return doc


def _port(host: str, port: int) -> int:
    if port < 0:
        raise ConfigError("--ray serves HTTP only: --http-port must be 0 or a port")
    if port:
        return port
    with socket.socket() as s:  # Ray Serve's proxy needs a port number: pick a free one
        s.bind((host, 0))
        return int(s.getsockname()[1])


def serve_on_ray(args: argparse.Namespace) -> int:
    from pyipu.serve.server import resolve_token

    serve = import_serve()
    import ray

    autoscaling = _autoscaling(args.autoscaling)
    config = RayServeConfig(
        repository=args.repository,
        num_replicas=args.num_replicas if autoscaling is None else None,
        autoscaling_config=autoscaling,
        replica_cpus=args.replica_cpus,
        max_ongoing_requests=args.max_ongoing_requests,
        token=resolve_token(args.token),
        max_body_bytes=args.max_body_mb << 20,
        grace_s=args.grace,
    )
    build(config)  # a bad option fails before joining the cluster
    port = _port(args.host, args.http_port)
    context = ray.init(address=args.ray_address)
    try:
        deploy(config, name=APP, http_host=args.host, http_port=port)
        replicas = config.num_replicas if autoscaling is None else "autoscaling"
        info = getattr(context, "address_info", None) or {}  # a Ray Client context has none
        print(
            f"pyipu serve: ray {info.get('gcs_address', args.ray_address)} "
            f"http {args.host}:{port} replicas {replicas} (grpc off)",
            file=sys.stderr,
            flush=True,
        )
        with stop_signals() as done:
            while not done.wait(0.5):
                pass
        serve.delete(APP)
    finally:
        ray.shutdown()
    return 0
