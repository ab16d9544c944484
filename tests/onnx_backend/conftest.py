"""Registers the marker onnx.backend.test's enable_report() puts on every test."""

from __future__ import annotations


def pytest_configure(config) -> None:  # noqa: ANN001
    config.addinivalue_line("markers", "onnx_coverage(proto, category): ONNX backend coverage")
