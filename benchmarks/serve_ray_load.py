"""Load generator for pyipu.serve.ray on a local Ray cluster: one node against two.

    python -P benchmarks/serve_ray_load.py [--seconds 5] [--clients 1,8,32] [--cpus 2]

The model, the requests and the client threads are serve_load.py's (an MLP 256-1024-256,
one-row requests with binary tensors from tritonclient.http, dynamic batching along dim 0 in
batches of 8). Each layout gets the same CPUs: "1 node" is one Ray node of `--cpus` CPUs with one
replica of `--cpus` compute threads; "2 nodes" is two nodes on loopback (ray.cluster_utils) of
half as many each, with one replica per node. Both run Ray Serve's HTTP proxy on every node.
Beside them, `pyipu serve` without Ray on the same model and `--cpus` threads. On a single
machine the two-node layout shows what Ray's routing across nodes costs, not a speed-up: both
nodes share the same cores."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import onnx

sys.path.insert(0, str(Path(__file__).parent))
from serve_load import BATCH, free_port, load, mlp, wait_ready  # noqa: E402


def repository(root: Path, threads: int | None) -> Path:
    repo = root / f"repo{threads or ''}"
    (repo / "mlp" / "1").mkdir(parents=True)
    onnx.save(mlp(BATCH), str(repo / "mlp" / "1" / "model.onnx"))
    extra = f', "num_threads": {threads}' if threads else ""
    (repo / "mlp" / "config.json").write_text(
        f'{{"batching_dim": 0, "max_inflight": 256, "batch_timeout_us": 500{extra}}}'
    )
    return repo


def run_ray(repo: Path, nodes: int, cpus: int, counts: list[int], seconds: float) -> None:
    import ray
    from ray import serve
    from ray.cluster_utils import Cluster

    from pyipu.serve.ray import RayServeConfig, deploy

    share = cpus / nodes
    node = {"num_cpus": share, "object_store_memory": 100 << 20}
    cluster = Cluster(initialize_head=True, head_node_args=node)
    for _ in range(nodes - 1):
        cluster.add_node(**node)
    cwd = os.getcwd()
    os.chdir(repo)  # Ray puts the driver's directory on the workers' sys.path
    try:
        ray.init(address=cluster.address, log_to_driver=False)
        port = free_port()
        config = RayServeConfig(
            str(repo),
            num_replicas=nodes,
            replica_cpus=share,
            max_replicas_per_node=1,
            max_ongoing_requests=256,
        )
        deploy(config, http_port=port)
        name = f"ray, {nodes} node{'s' if nodes > 1 else ''}"
        load(port, 1, 1.0)  # warm-up
        for n in counts:
            rps, p50, p99 = load(port, n, seconds)
            print(f"{name:<16} {n:>7} {rps:>9.0f} {p50:>8.2f} {p99:>8.2f}", flush=True)
    finally:
        os.chdir(cwd)
        serve.shutdown()
        ray.shutdown()
        cluster.shutdown()


def run_plain(repo: Path, counts: list[int], seconds: float) -> None:
    port = free_port()
    cmd = [sys.executable, "-P", "-m", "pyipu", "serve", str(repo)]
    cmd += ["--http-port", str(port), "--grpc-port", "-1"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    try:
        wait_ready(port, proc)
        load(port, 1, 1.0)
        for n in counts:
            rps, p50, p99 = load(port, n, seconds)
            print(f"{'pyipu serve':<16} {n:>7} {rps:>9.0f} {p50:>8.2f} {p99:>8.2f}", flush=True)
    finally:
        proc.terminate()
        proc.wait(60)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--clients", default="1,8,32")
    p.add_argument("--cpus", type=int, default=2, help="CPUs (and compute threads) in all")
    args = p.parse_args()
    counts = [int(c) for c in args.clients.split(",")]
    print(
        f"MLP 256-1024-256, one-row requests, {args.cpus} CPUs per layout, "
        f"{args.seconds:g} s per point, {os.cpu_count()} CPUs on the machine"
    )
    print(f"{'server':<16} {'clients':>7} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8}")
    with tempfile.TemporaryDirectory() as tmp:
        run_plain(repository(Path(tmp), args.cpus), counts, args.seconds)
        ray_repo = repository(Path(tmp), None)  # threads: each replica's CPU share
        for nodes in (1, 2):
            run_ray(ray_repo, nodes, args.cpus, counts, args.seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
