"""Prometheus metrics of one server (its own registry, so that several servers in a process do
not share counters), and the JSON-lines log formatter."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

_LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10)
_ROW_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 1024)


class Metrics:
    def __init__(self, runner_stats: Callable[[], Iterable[tuple[str, str, dict[str, Any]]]]):
        self.registry = CollectorRegistry()
        labels = ["model", "version", "protocol"]
        self.requests = Counter(
            "pyipu_serve_requests", "Inference requests received", labels, registry=self.registry
        )
        self.failures = Counter(
            "pyipu_serve_request_failures",
            "Inference requests that failed, by reason (the gRPC status name)",
            [*labels, "reason"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "pyipu_serve_request_duration_seconds",
            "Request latency from decoded request to results, per model",
            ["model", "version"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.rows = Histogram(
            "pyipu_serve_request_batch_size",
            "Batches (or rows along batching_dim) a request carries",
            ["model", "version"],
            buckets=_ROW_BUCKETS,
            registry=self.registry,
        )
        self.inflight = Gauge(
            "pyipu_serve_inflight_requests",
            "Accepted requests not yet completed",
            ["model", "version"],
            registry=self.registry,
        )
        self.registry.register(_RunnerCollector(runner_stats))

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _RunnerCollector:
    """The runners' own counters, read from `Runner.stats()` at scrape time."""

    def __init__(self, source: Callable[[], Iterable[tuple[str, str, dict[str, Any]]]]) -> None:
        self._source = source

    def collect(self) -> Iterable[Any]:
        labels = ["model", "version"]
        iters = CounterMetricFamily(
            "pyipu_serve_runtime_iterations",
            "Device iterations run (one batch each; with dynamic batching, rows of several "
            "requests share one)",
            labels=labels,
        )
        padded = CounterMetricFamily(
            "pyipu_serve_runtime_padded_rows", "Zero rows padding partial batches", labels=labels
        )
        done = CounterMetricFamily(
            "pyipu_serve_runtime_requests_completed",
            "Requests the runtime completed",
            labels=labels,
        )
        queue = GaugeMetricFamily(
            "pyipu_serve_runtime_queue_depth",
            "Queued batches of the model's anchors",
            labels=labels,
        )
        for model, version, stats in self._source():
            key = [model, version]
            iters.add_metric(key, stats["iterations"])
            padded.add_metric(key, stats["padded_rows"])
            done.add_metric(key, stats["requests_completed"])
            queue.add_metric(key, max(stats["queue_depth"].values(), default=0))
        return [iters, padded, done, queue]


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time, level, logger, message and the record's `fields`."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        doc.update(getattr(record, "fields", {}))
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc, default=str)
