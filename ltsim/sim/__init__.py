"""The discrete-event simulator: SimPy engine, traces and metrics."""
