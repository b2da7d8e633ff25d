"""Model builders. Build with `build.build_model`; the named sizes are pure data in `fsdp_bench.plan.flavors`."""
