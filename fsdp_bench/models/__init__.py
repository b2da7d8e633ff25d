"""Model builders. Import `fsdp_bench.models.build` for the torch side; `flavors` is pure data."""
