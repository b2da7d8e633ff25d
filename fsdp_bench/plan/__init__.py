"""What to run, pure Python (no torch): the `Case` and its id, the strategy catalog, model flavors,
the `--bench-*` options, suites, multi-node settings and the fault-injection grammar."""
