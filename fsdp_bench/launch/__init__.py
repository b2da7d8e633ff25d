"""The parent side, no torch: the sweep session, one case's torchrun (runner), outcome
classification, process cleanup, multi-node rendezvous, Slurm and the run's environment."""
