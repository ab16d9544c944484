"""`poptorch.DataLoader`: a torch DataLoader whose batches are what one call of a PopTorch
model takes: batch_size (the micro-batch) × deviceIterations × replicationFactor ×
gradientAccumulation samples."""

from __future__ import annotations

from typing import Any

import torch

from pyipu.poptorch.enums import DataLoaderMode
from pyipu.poptorch.errors import OptionError
from pyipu.poptorch.options import Options


class DataLoader(torch.utils.data.DataLoader):
    """`DataLoader(options, dataset, batch_size=1, shuffle=None, num_workers=0, drop_last=True,
    persistent_workers=None, auto_distributed_partitioning=True, mode=DataLoaderMode.Sync,
    **kwargs)`; the other keyword arguments go to torch's DataLoader. `training` says whether
    gradient accumulation counts (PopTorch reads it from the options' Training group)."""

    def __init__(
        self,
        options: Options,
        dataset: Any,
        batch_size: int = 1,
        shuffle: bool | None = None,
        num_workers: int = 0,
        drop_last: bool = True,
        persistent_workers: bool | None = None,
        auto_distributed_partitioning: bool = True,
        mode: DataLoaderMode = DataLoaderMode.Sync,
        async_options: dict[str, Any] | None = None,
        rebatched_worker_size: int | None = None,
        **kwargs: Any,
    ) -> None:
        if not isinstance(options, Options):
            raise OptionError(f"DataLoader needs poptorch.Options, got {type(options).__name__}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise OptionError(f"batch_size must be an int >= 1, got {batch_size!r}")
        self.options = options
        self.mode = DataLoaderMode(mode)
        self.micro_batch_size = batch_size
        self.combinedBatchSize = batch_size * options.batch_factor(True)
        if persistent_workers is None:
            persistent_workers = num_workers > 0
        super().__init__(
            dataset,
            batch_size=self.combinedBatchSize,
            shuffle=bool(shuffle),
            num_workers=num_workers,
            drop_last=drop_last,
            persistent_workers=persistent_workers,
            **kwargs,
        )
