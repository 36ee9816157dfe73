"""Memory accounting for the executor on CPU: bytes of live tensors, deduplicated by storage.

A CPU process has no allocator statistics comparable to ``torch.cuda.max_memory_allocated``, so the
runtime counts what a training step keeps alive, at op boundaries:

- *static*: parameters, gradients and optimizer state (the tensors ``static_tensors`` lists);
- *saved*: every tensor autograd saves for backward, seen through
  ``torch.autograd.graph.saved_tensors_hooks``. The pack hook wraps the tensor in a holder whose
  lifetime is the saved variable's: when backward (or dropping a discarded graph) releases it, the
  holder dies and its storage leaves the count. Parameters that autograd saves (a Linear's weight)
  are already static and are not wrapped;
- *extra*: tensors the runtime holds itself (K/V state and its gradients, stage inputs kept for a
  recompute, received and in-flight P2P buffers), passed to ``live_bytes``.

A storage is counted once however many views of it are saved or held (keyed by data pointer and
device). Temporaries inside one op (a layer's working set) are not seen: samples are taken between
ops, as the simulator charges buffers at op boundaries.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from contextlib import AbstractContextManager

import torch

StorageKey = tuple[int, str]


def storage_key(tensor: torch.Tensor) -> StorageKey:
    return tensor.untyped_storage().data_ptr(), str(tensor.device)


def storage_bytes(tensor: torch.Tensor) -> int:
    return int(tensor.untyped_storage().nbytes())


class _Saved:
    """Holds one saved tensor for autograd; tells the tracker when the graph lets it go."""

    __slots__ = ("tensor", "key", "tracker")

    def __init__(self, tracker: "MemoryTracker", tensor: torch.Tensor, key: StorageKey) -> None:
        self.tracker, self.tensor, self.key = tracker, tensor, key

    def __del__(self) -> None:
        tracker = self.tracker
        if tracker is not None:
            tracker._release(self.key)


class MemoryTracker:
    """Live bytes of one process: static tensors + autograd-saved tensors + runtime-held tensors."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._saved: dict[StorageKey, list[int]] = {}  # key -> [holders, bytes]
        self._static: dict[StorageKey, int] = {}
        self.saved_bytes = 0
        self.static_bytes = 0

    def set_static(self, tensors: Iterable[torch.Tensor]) -> int:
        """Record the static tensors (parameters, grads, optimizer state); returns their bytes."""
        self._static = {}
        for tensor in tensors:
            self._static.setdefault(storage_key(tensor), storage_bytes(tensor))
        self.static_bytes = sum(self._static.values())
        return self.static_bytes

    def hooks(self) -> AbstractContextManager:
        """The saved-tensor hooks to wrap forward passes in."""
        return torch.autograd.graph.saved_tensors_hooks(self._pack, _unpack)

    def _pack(self, tensor: torch.Tensor) -> object:
        key = storage_key(tensor)
        if key in self._static:
            return tensor
        with self._lock:
            entry = self._saved.get(key)
            if entry is None:
                nbytes = storage_bytes(tensor)
                self._saved[key] = [1, nbytes]
                self.saved_bytes += nbytes
            else:
                entry[0] += 1
        return _Saved(self, tensor, key)

    def _release(self, key: StorageKey) -> None:
        with self._lock:
            entry = self._saved[key]
            entry[0] -= 1
            if entry[0] == 0:
                del self._saved[key]
                self.saved_bytes -= entry[1]

    @property
    def num_saved_storages(self) -> int:
        return len(self._saved)

    def live_bytes(self, extra: Iterable[torch.Tensor | None] = ()) -> int:
        """Static + saved + the ``extra`` tensors' storages not already counted."""
        total = self.static_bytes + self.saved_bytes
        seen: set[StorageKey] = set()
        with self._lock:
            for tensor in extra:
                if tensor is None:
                    continue
                key = storage_key(tensor)
                if key in seen or key in self._static or key in self._saved:
                    continue
                seen.add(key)
                total += storage_bytes(tensor)
        return total


def _unpack(packed: object) -> torch.Tensor:
    return packed.tensor if isinstance(packed, _Saved) else packed
