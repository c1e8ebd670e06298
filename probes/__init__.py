"""Instruments over hooked activations: functions from a model and tokens (or a cache) to
numbers. Each module is a row of the ``[probes]`` table of seqprobe/registry.toml."""
