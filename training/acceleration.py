"""What makes `attserve train --device cuda` use the GPU, chosen per device so that CPU training
stays exactly what it was:

- mixed precision (`autocast_dtype`): bf16 autocast on CUDA (the master weights, the optimizer
  state and the checkpoint stay fp32, so export is unchanged); none on CPU unless asked for;
- the fused Adam/AdamW kernels (`fused_optimizer`) on CUDA only: on CPU the default
  (for-each) implementation keeps the weights bit for bit;
- batches padded ahead of the step (`batch_stream`): on CUDA a DataLoader with worker
  processes pads the next batches into pinned memory while the GPU runs the current one, and the
  copy to the GPU is non-blocking; on CPU the batches are padded in the loop, as before (a worker
  would take a core from the step itself);
- `torch.compile` (`compile_network`), opt-in: its payoff has to be measured on the GPU (the
  bucketed batches have many shapes, so it compiles with dynamic shapes).

torch is imported here: the trainer is its only caller.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any, Iterator, Literal, Sequence

import numpy as np
import torch

log = logging.getLogger(__name__)

Precision = Literal["auto", "fp32", "bf16"]
PRECISIONS: tuple[str, ...] = ("auto", "fp32", "bf16")
# Optimizers whose fused kernel torch has on CUDA (torch.optim.Adam/AdamW(fused=True)).
FUSED_OPTIMIZERS = ("adam", "adamw")
# DataLoader workers that pad batches ahead of a CUDA step; more add start-up time per epoch
# and bring nothing once the GPU is the bottleneck.
MAX_LOADER_WORKERS = 4
PREFETCH_BATCHES = 4  # per worker


def autocast_dtype(device_type: str, precision: Precision = "auto", bf16_supported: bool | None = None) -> torch.dtype | None:
    """The dtype the forward pass autocasts to, or None for plain fp32. "auto": bf16 on a CUDA
    device that supports it, else fp32 (CPU results stay bit-identical); "bf16": bf16 wherever
    torch autocasts (CUDA, and CPU for testing the path); "fp32": never."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, not {precision!r}")
    if precision == "fp32":
        return None
    if bf16_supported is None:
        bf16_supported = device_type != "cuda" or torch.cuda.is_bf16_supported()
    if precision == "bf16":
        if not bf16_supported:
            raise ValueError(f"precision bf16 asked for, but this {device_type} device does not support bf16")
        return torch.bfloat16
    return torch.bfloat16 if device_type == "cuda" and bf16_supported else None


def autocast(device_type: str, dtype: torch.dtype | None) -> contextlib.AbstractContextManager:
    """torch.autocast for `dtype`, or a no-op context for fp32."""
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device_type, dtype=dtype)


def fused_optimizer(optimizer: str, device_type: str) -> bool:
    """Whether to build the optimizer with fused=True: Adam/AdamW on CUDA (one kernel for every
    parameter instead of several per tensor). Never on CPU, whose results must stay unchanged."""
    return device_type == "cuda" and optimizer in FUSED_OPTIMIZERS


def loader_workers(device_type: str, cores: int) -> int:
    """Worker processes padding batches ahead of the step: none on CPU (the step uses every core),
    on CUDA up to MAX_LOADER_WORKERS, leaving a core to the training process."""
    if device_type != "cuda":
        return 0
    return max(0, min(MAX_LOADER_WORKERS, cores - 1))


class _BatchDataset(torch.utils.data.Dataset):
    """Item i = batch i, padded: (ids tensors, labels, auxiliary targets), all on CPU."""

    def __init__(self, data: Any, batches: Sequence[np.ndarray]) -> None:
        self.data, self.batches = data, batches

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, index: int):
        indices = self.batches[index]
        ids, labels = self.data.batch(indices)
        return ids, labels, self.data.targets(indices)


def to_device(batch: Any, device: torch.device) -> Any:
    """A (nested tuple/dict of) CPU tensor(s) on `device`; non-blocking, which overlaps the copy
    with the GPU's work when the tensors are pinned."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, dict):
        return {k: to_device(v, device) for k, v in batch.items()}
    return type(batch)(to_device(v, device) for v in batch)


def batch_stream(data: Any, batches: Sequence[np.ndarray], device: torch.device, workers: int = 0) -> Iterator[tuple]:
    """(ids, labels, targets) of each batch in order, on `device`. With workers, a DataLoader
    pads them ahead in worker processes into pinned memory (CUDA); without, each batch is padded
    when the loop asks for it, exactly as before (the CPU path: no torch RNG is drawn, so dropout
    masks and the weights stay the same)."""
    if workers <= 0:
        for indices in batches:
            ids, labels = data.batch(indices, device)
            yield ids, labels, data.targets(indices, device)
        return
    loader = torch.utils.data.DataLoader(
        _BatchDataset(data, batches), batch_size=None, shuffle=False, num_workers=workers,
        pin_memory=device.type == "cuda", prefetch_factor=PREFETCH_BATCHES,
        # its own generator: the loader's base seed must not advance torch's global one
        generator=torch.Generator(),
    )
    for batch in loader:
        yield to_device(batch, device)


def compile_network(network: torch.nn.Module) -> torch.nn.Module:
    """Compile the network's forward in place (nn.Module.compile: the state dict keeps its names,
    so checkpoints and export are unchanged); dynamic shapes, as every bucket has its own lengths."""
    network.compile(dynamic=True)
    return network


def uncompile_network(network: torch.nn.Module) -> torch.nn.Module:
    """Undo `compile_network` (export traces the plain module)."""
    if getattr(network, "_compiled_call_impl", None) is not None:
        network._compiled_call_impl = None
    return network


__all__ = ["PRECISIONS", "autocast", "autocast_dtype", "batch_stream", "compile_network", "fused_optimizer", "loader_workers",
           "to_device", "uncompile_network"]
