"""What the executor's compute thread paid per send before comm._Watchers: two gloo processes,
one thread each, the receiver computing; the sender times ``dist.isend`` alone and then starting
a thread to wait for the work (what ``Async`` did per op), while both cores compute. Median and
max over 40 sends. Not a test.

    python validation/executor/comm_start.py
"""

from __future__ import annotations

import os
import statistics
import threading
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def _worker(rank: int, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    message, matrix = torch.randn(128, 256), torch.randn(512, 512)
    isend_s, start_s = [], []
    for i in range(40):
        if rank == 0:
            begin = time.perf_counter()
            work = dist.isend(message, 1, tag=i)
            sent = time.perf_counter()
            waiter = threading.Thread(target=work.wait, daemon=True)
            waiter.start()
            isend_s.append(sent - begin)
            start_s.append(time.perf_counter() - sent)
            for _ in range(20):
                matrix @ matrix  # the sender computes on, as a pipeline stage does
            waiter.join()
        else:
            for _ in range(10):
                matrix @ matrix
            dist.recv(message, 0, tag=i)
    if rank == 0:
        print(f"isend {statistics.median(isend_s) * 1e3:.3f} ms median; thread start "
              f"{statistics.median(start_s) * 1e3:.3f} ms median, {max(start_s) * 1e3:.3f} max")
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(_worker, args=(29533,), nprocs=2)
