"""State-space models: the recurrent base, the SSD scan, Mamba, Mamba-2 and MambaZero."""
