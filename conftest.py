pytest_plugins = ["fsdp_bench.pytest_plugin"]
