"""Executor: a small PyTorch decoder and the runtime that runs a Plan on real devices.

model.py holds the decoder over packed variable-length chunks (kernels.py: its memory-lean norm,
SwiGLU, RoPE and CPU attention functions); state.py the K/V state store of dependent chunks with
forward / recompute / backward of one chunk on one stage; runtime.py ``execute_plan``, which runs
a Plan with one process per simulated device (worker.py; comm.py for the P2P channels and
collectives; memtrack.py for CPU memory accounting) and returns a measured Trace. Importing this
package imports torch; nothing in the core imports it.
"""
