"""`pyipu serve`: a KServe v2 / Open Inference Protocol server (HTTP and gRPC, as NVIDIA Triton
speaks it) over pyipu's runtime. Needs the `serve` extra: `pip install pyipu[serve]`.

    from pyipu.serve import Server, ServerConfig
    with Server(ServerConfig("models", http_port=0, grpc_port=0)) as server:
        print(server.http_port, server.grpc_port)

docs/serving.md describes the repository layout, the endpoints, metrics and security."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyipu.serve.server import Server, ServerConfig

__all__ = ["Server", "ServerConfig"]


def __getattr__(name: str) -> Any:
    # Imported on first use, so that `pyipu serve` without the extra can say what to install.
    if name in __all__:
        from pyipu.serve import server

        return getattr(server, name)
    raise AttributeError(f"module 'pyipu.serve' has no attribute {name!r}")
