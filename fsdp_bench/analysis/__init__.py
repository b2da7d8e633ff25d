"""Pure numbers over plans and results (no torch, no pandas): step-time statistics, aggregation of
rank records, FLOPs and MFU, the ZeRO model-state expectation, the communication model,
will-it-fit and the simulation summary."""
