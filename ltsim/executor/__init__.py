"""Executor: a small PyTorch decoder and the chunk-level API that runs schedules on real devices.

model.py holds the decoder over packed variable-length chunks; state.py the K/V state store of
dependent chunks with forward / recompute / backward of one chunk on one stage. Importing this
package imports torch; nothing in the core imports it.
"""
