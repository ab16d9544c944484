"""`pyipu serve MODEL_REPOSITORY`: serve until SIGTERM or SIGINT, then stop gracefully."""

from __future__ import annotations

import argparse
import contextlib
import logging
import signal
import sys
import threading
from collections.abc import Iterator

TOKEN_ENV = "PYIPU_SERVE_TOKEN"  # the bearer token when --token is not given


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="pyipu serve",
        description="Serve a Triton-style model repository over the KServe v2 protocol "
        "(HTTP and gRPC).",
    )
    p.add_argument("repository", metavar="MODEL_REPOSITORY", help="<repo>/<model>/<version>/")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--http-port", type=int, default=8000, help="HTTP port (default 8000, -1 off)")
    p.add_argument("--grpc-port", type=int, default=8001, help="gRPC port (default 8001, -1 off)")
    p.add_argument(
        "--token", help=f"bearer token required on every endpoint but health (or ${TOKEN_ENV})"
    )
    p.add_argument(
        "--max-body-mb", type=int, default=64, help="HTTP body / gRPC message limit (default 64)"
    )
    p.add_argument(
        "--grace", type=float, default=30.0, help="seconds accepted requests get at shutdown"
    )
    p.add_argument(
        "--log-level",
        default="warning",
        choices=["debug", "info", "warning", "error"],
        help="JSON-lines logs on stderr at this level (default warning)",
    )
    r = p.add_argument_group(
        "Ray Serve (pip install pyipu[serve-ray]; HTTP only, through Ray Serve's proxy)"
    )
    r.add_argument("--ray", action="store_true", help="serve replicas on a Ray cluster")
    r.add_argument(
        "--ray-address",
        help="cluster to join (ray://HOST:10001 or HOST:6379; default: $RAY_ADDRESS, the "
        "cluster `ray start` began on this machine, else a new local one)",
    )
    r.add_argument("--num-replicas", type=int, default=1, help="replicas (default 1)")
    r.add_argument(
        "--autoscaling",
        metavar="JSON",
        help='Ray Serve autoscaling_config instead of --num-replicas, e.g. \'{"min_replicas": 1, '
        '"max_replicas": 4, "target_ongoing_requests": 16}\'',
    )
    r.add_argument(
        "--replica-cpus",
        type=float,
        default=1.0,
        help="CPUs Ray reserves per replica; compute threads of models whose config sets "
        "none (default 1)",
    )
    r.add_argument(
        "--max-ongoing-requests",
        type=int,
        default=64,
        help="requests Ray sends one replica at once, for the runtime to batch (default 64)",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        from pyipu.serve.metrics import JsonFormatter
        from pyipu.serve.server import Server  # noqa: F401 - grpc, aiohttp, tritonclient
    except ImportError as e:
        print(
            f"pyipu serve: error: {e} (install the extra: pip install pyipu[serve])",
            file=sys.stderr,
        )
        return 2
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("pyipu.serve")
    saved = logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(args.log_level.upper())
    logger.propagate = False
    try:
        if args.ray:
            from pyipu.serve.ray_cli import serve_on_ray

            return serve_on_ray(args)
        return _serve(args)
    finally:  # main() may run inside another program (the tests): leave logging as it was
        logger.removeHandler(handler)
        logger.setLevel(saved[0])
        logger.propagate = saved[1]


@contextlib.contextmanager
def stop_signals() -> Iterator[threading.Event]:
    """An event that SIGTERM or SIGINT sets, for as long as the block runs."""
    done = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        done.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield done
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _serve(args: argparse.Namespace) -> int:
    from pyipu.serve.server import Server, ServerConfig, resolve_token

    config = ServerConfig(
        repository=args.repository,
        host=args.host,
        http_port=None if args.http_port < 0 else args.http_port,
        grpc_port=None if args.grpc_port < 0 else args.grpc_port,
        token=resolve_token(args.token),
        max_body_bytes=args.max_body_mb << 20,
        grace_s=args.grace,
    )
    server = Server(config).start()
    with stop_signals() as done:
        try:
            http = f"{config.host}:{server.http_port}" if server.http_port is not None else "off"
            grpc = f"{config.host}:{server.grpc_port}" if server.grpc_port is not None else "off"
            print(f"pyipu serve: http {http} grpc {grpc}", file=sys.stderr, flush=True)
            while not done.wait(0.5):
                pass
        finally:
            server.stop()
    return 0
