"""fsdp-bench: compare DDP, FSDP1 and FSDP2 strategies on real models, one torchrun per case."""

__version__ = "0.1.0"
