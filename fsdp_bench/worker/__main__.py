from fsdp_bench.worker.entry import entry

entry()
