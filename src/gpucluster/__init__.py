"""gpucluster: take bare GPU machines to a working distributed-training cluster."""

__version__ = "0.1.0"
