"""torchrun without its interpreter teardown, for one case on one or more nodes.

    python -m fsdp_bench.worker.torchrun ARGS   ==   python -m torch.distributed.run ARGS

The same torchrun (`torch.distributed.run.main`, same flags, same agent, rendezvous and error
files); only a successful launch leaves with `os._exit` instead of unloading torch, which costs
each case about 0.3 s of nothing. A failed launch raises as torchrun does, with its traceback and
exit code.
"""

from torch.distributed.run import main

from fsdp_bench.worker.lifetime import exit_now

if __name__ == "__main__":
    main()
    exit_now(0)
