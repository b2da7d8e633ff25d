"""One rank of one case: the only package that imports torch.

    python -m fsdp_bench.worker.torchrun ... -m fsdp_bench.worker --case CASE.json --out DIR

`entry.main` is that command; `loop.run(case)` trains and measures one rank (also in-process at
world size 1); `setup.build_rank` builds model, data, strategy and optimizer as a case says, for
the loop, the communication trace and the scripts alike. Importing this package imports no torch.
"""
