"""Build a model flavor, find the blocks each strategy wraps or shards one by one, and
materialize meta-device parameters after sharding with values that do not depend on sharding."""

from __future__ import annotations

import contextlib
import zlib
from collections.abc import Callable, Iterator

import torch
from torch import nn

from fsdp_bench.plan.flavors import ModelFlavor, flavor_for
from fsdp_bench.worker.models.gpt import GPT
from fsdp_bench.worker.models.linear import LinearStack

_BUILDERS = {"gpt": GPT, "linear": LinearStack}
# The modules whose constructors draw random initial values (the others fill constants).
_RANDOMLY_INITIALIZED = (nn.Linear, nn.Embedding)
_WRAPPER_PREFIXES = ("_fsdp_wrapped_module.", "_checkpoint_wrapped_module.", "_orig_mod.")


def build_model(flavor: ModelFlavor, *, seed: int, device: torch.device | str = "cpu", meta: bool = False) -> nn.Module:
    """The flavor's model with deterministic weights: every rank and strategy starts identical.

    `meta=True` (Hugging Face flavors) leaves parameters on the meta device; `materialize_*`
    gives them their values after sharding.
    """
    builder = flavor.architecture.builder  # the catalog row's (plan.architectures)
    if builder == "hf":
        from fsdp_bench.worker.models.hf import build_hf_model

        model = build_hf_model(flavor, meta=meta)
        return model if meta else model.to(device)
    with torch.random.fork_rng(devices=[]), _without_default_init():
        torch.manual_seed(seed)
        model = _BUILDERS[builder](**flavor.config)  # its init_weights sets every parameter
    # already there: skip .to(), which under fake tensors (worker.estimate) cannot swap tied parameters
    return model if next(model.parameters()).device == torch.device(device) else model.to(device)


@contextlib.contextmanager
def _without_default_init() -> Iterator[None]:
    """Modules constructed without their own random initialization. The project's models set
    every parameter in `init_weights`, so the defaults were drawn only to be overwritten: each
    parameter was initialized twice, in every case's set-up (GPT-2 124M: 0.6 s of a 1.3 s build
    on the 2-core VM; gpt_350m 1.9 s of 3.7-4.1 s). Parameters are still allocated (empty)."""
    saved = {cls: cls.__dict__["reset_parameters"] for cls in _RANDOMLY_INITIALIZED}
    for cls in saved:
        cls.reset_parameters = _no_reset
    try:
        yield
    finally:
        for cls, reset in saved.items():
            cls.reset_parameters = reset


def _no_reset(module: nn.Module) -> None:
    return None


def get_flavor(name: str) -> ModelFlavor:
    return flavor_for(name)


def block_modules(model: nn.Module) -> list[nn.Module]:
    """The repeated blocks (decoder layers, linear layers) in forward order, found from the model.

    Hugging Face models name their unsplittable layer classes in `_no_split_modules` (what
    accelerate's device maps and FSDP auto-wrap use); other models hold them in a `blocks`
    ModuleList; failing both, the longest ModuleList is taken.
    """
    names: set[str] = set()
    for module in model.modules():
        names.update(getattr(module, "_no_split_modules", None) or ())
    if names:
        blocks = [m for m in model.modules() if type(m).__name__ in names]
        if blocks:
            return blocks
    blocks = getattr(model, "blocks", None)
    if isinstance(blocks, nn.ModuleList) and len(blocks) > 0:
        return list(blocks)
    lists = [m for m in model.modules() if isinstance(m, nn.ModuleList) and len(m) > 0]
    if not lists:
        raise ValueError(f"{type(model).__name__} has no repeated blocks (_no_split_modules or a ModuleList)")
    return list(max(lists, key=len))


def count_parameters(model: nn.Module) -> int:
    """Unique parameters (tied weights counted once)."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())


def has_meta_params(model: nn.Module) -> bool:
    return any(p.is_meta for p in model.parameters())


def clean_name(name: str) -> str:
    for prefix in _WRAPPER_PREFIXES:
        name = name.replace(prefix, "")
    return name.removeprefix("module.")


def init_values(name: str, shape: torch.Size, seed: int) -> torch.Tensor:
    """The initial value of parameter `name`: a function of (seed, name) only, so DDP, FSDP1 and
    FSDP2 ranks start from the same model however it is cut. Norm weights 1, biases 0, matrices
    N(0, 0.02) as GPT-2 / Llama initialize them."""
    if len(shape) <= 1:
        return torch.ones(shape) if name.endswith("weight") and "bias" not in name else torch.zeros(shape)
    gen = torch.Generator().manual_seed(seed * 1_000_003 + zlib.crc32(name.encode()))
    return torch.randn(shape, generator=gen) * 0.02


def param_init_fn(model: nn.Module, device: torch.device, seed: int) -> Callable[[nn.Module], None]:
    """Materialize one module's own meta parameters (FSDP1's `param_init_fn` contract).

    Tied parameters (one Parameter in two modules) stay tied: the first module to materialize it
    makes the new Parameter, later ones reuse it.
    """
    canonical = {id(p): clean_name(n) for n, p in model.named_parameters()}
    prefixes = {id(m): clean_name(n) for n, m in model.named_modules()}
    done: dict[int, nn.Parameter] = {}

    def init(module: nn.Module) -> None:
        for name, p in list(module._parameters.items()):
            if p is None or not p.is_meta:
                continue
            if id(p) not in done:
                full = canonical.get(id(p)) or f"{prefixes.get(id(module), '')}.{name}".lstrip(".")
                done[id(p)] = nn.Parameter(
                    init_values(full, p.shape, seed).to(device, p.dtype), requires_grad=p.requires_grad
                )
            module._parameters[name] = done[id(p)]

    return init


def move_buffers(model: nn.Module, device: torch.device | str) -> None:
    """Put every real buffer on `device`: meta building leaves buffers (rotary inv_freq) on the
    host, and materializing parameters alone would leave them there (NCCL DDP then fails)."""
    for module in model.modules():
        for name, b in list(module._buffers.items()):
            if b is not None and not b.is_meta:
                module._buffers[name] = b.to(device)


def materialize_module(model: nn.Module, device: torch.device, seed: int) -> None:
    """Give an unsharded (or DDP-bound) model its parameters, one tensor at a time, and its
    buffers on the same device."""
    init = param_init_fn(model, device, seed)
    for module in list(model.modules()):
        init(module)
    move_buffers(model, device)


def materialize_fsdp2(
    model: nn.Module, device: torch.device, seed: int, *, param_device: torch.device | str | None = None
) -> None:
    """Allocate FSDP2's sharded meta parameters and fill each rank's shard from the full value.

    The full value of one parameter exists at a time (built on the host, then split locally
    without communication), so the peak is the largest tensor, not the model. Parameters go to
    `param_device` (the host under CPUOffloadPolicy, which wants its shards there), buffers to
    `device` (compute needs them there).
    """
    from torch.distributed.tensor import DTensor, distribute_tensor

    buffers = {n: b.detach().clone() for n, b in model.named_buffers()}  # to_empty wipes them too
    model.to_empty(device=param_device if param_device is not None else device)
    with torch.no_grad():
        for prefix, module in model.named_modules():
            for name, b in list(module._buffers.items()):
                saved = buffers.get(f"{prefix}.{name}".lstrip("."))
                if b is not None and saved is not None:
                    module._buffers[name] = saved.to(device)
        for name, p in model.named_parameters():
            full = init_values(clean_name(name), p.shape, seed).to(p.dtype)
            if isinstance(p, DTensor):
                local = distribute_tensor(full, p.device_mesh, p.placements, src_data_rank=None).to_local()
                p.to_local().copy_(local)
            else:
                p.copy_(full)
