"""`pyipu serve`: a KServe v2 / Open Inference Protocol server (HTTP and gRPC, as NVIDIA Triton
speaks it) over pyipu's runtime. Needs the `serve` extra: `pip install pyipu[serve]`.

    from pyipu.serve import Server, ServerConfig
    with Server(ServerConfig("models", http_port=0, grpc_port=0)) as server:
        print(server.http_port, server.grpc_port)

docs/serving.md describes the repository layout, the endpoints, metrics and security."""

from pyipu.serve.server import Server, ServerConfig

__all__ = ["Server", "ServerConfig"]
