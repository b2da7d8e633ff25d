"""The moments of a training step where one rank's peak can fall, from the peak's parts
(`fit.predict_peak_bytes` counts the parts): the top of backward and the optimizer step, DDP's
block backward and, with the reduction deferred, its head backward; FSDP2's block backward and
block forward all-gather copy-out. Each moment was read off torch's memory trackers (MemTracker,
FSDPMemTracker) on CPU; the largest wins (pure, no torch).
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Sequence
from importlib import metadata
from itertools import accumulate

from fsdp_bench.analysis.activations import Activations
from fsdp_bench.analysis.comm_model import Unit, padded_numel
from fsdp_bench.analysis.model_state import shard_size
from fsdp_bench.plan.catalog import strategy as catalog_strategy


def with_block_moments(
    phases: dict[str, float],
    parts: dict[str, float],
    strategy: str,
    units: Sequence[Unit],
    world_size: int,
    acts: Activations,
    grad_accum: int,
    mesh: tuple[int, int] | None,
    dtype_bytes: int,
    *,
    deferred: bool = False,
    tied_head_numel: int = 0,
    buckets_at_top: bool = True,
    gloo: bool = False,
    torch_version: str | None = None,
) -> dict[str, float]:
    """`phases` with the moments inside the blocks: on FSDP2 a block's backward and a block's
    forward all-gather copy-out, on DDP a block's backward. Which of them makes the peak changes
    with the world size (the top of backward at a few ranks, the padded buffers at hundreds) and
    the device (DDP's buckets), so every candidate is computed and the largest wins. FSDP2's
    moments follow `torch_version` (default: the installed torch's)."""
    written = None if buckets_at_top else ddp_written_bucket_bytes(units, tied_head_numel)
    ddp = _ddp_block_backward_bytes(parts, units, acts, grad_accum, written, tied_head_numel)
    phases = {**phases, "backward": max(phases["backward"], ddp)}
    gathered = _fsdp2_full_units(strategy, units, world_size, mesh, dtype_bytes)
    if gathered is None:
        return phases
    # with accumulation the earlier micro-batches' gradients are alive in every block (sharded,
    # or unsharded when the reduction waits for the last micro-step)
    kept = parts["params"] + parts["optimizer"] + parts["accumulated_grads"]
    reshard = catalog_strategy(strategy).reshard_after_forward
    shard = shard_size(strategy, world_size, mesh)
    backward = kept + _block_backward_bytes(
        units,
        *gathered,
        acts,
        shard=shard,
        reshard=reshard,
        dtype_bytes=dtype_bytes,
        deferred=deferred,
        tied_head_numel=tied_head_numel,
    )
    if reshard:
        backward = max(backward, kept + _root_pre_backward_bytes(gathered[0], acts))
    if not deferred:
        held = root_reduce_holds_head_grad(torch_version)
        last = _root_reduce_scatter_bytes(units, gathered[0], shard, gloo=gloo, accumulating=grad_accum > 1, head=held)
        backward = max(backward, parts["params"] + parts["optimizer"] + parts["grads"] + last)
    phases = {**phases, "backward": max(phases["backward"], backward)}
    forward = max(_block_forward_bytes(*gathered, acts, reshard=reshard), _loss_forward_bytes(*gathered, acts, reshard))
    return {"forward": kept + forward, **phases}


def _root_reduce_scatter_bytes(
    units: Sequence[Unit], root: int, shard: int, *, gloo: bool, accumulating: bool, head: bool
) -> int:
    """FSDP2's last moment of backward, the root's post-backward reduce-scatter, beyond the
    parameters, optimizer state and sharded gradients: its input (the root's padded gradients) and
    output (a shard of it; with accumulation apart from the sharded gradients it is added into),
    the head's vocab-wide unsharded gradient still referenced, and on real gloo ranks a copy of the
    whole input (ProcessGroupGloo reduce-scatters by all-reducing a clone:
    worker.gloo_reduce_scatter). Every activation is gone by then, so it makes the peak where the
    root outweighs the activations: read off the estimator (the real gloo rank's peak to the byte)
    on dev seed 16 (an untied Mistral-style config, vocabulary 2,089, hidden 120) at 3 real ranks:
    'TEMP' the 2,007,840 B input twice and the 669,280 B output, 'UNSHARDED_GRAD' the 1,002,720 B
    head, 568 B over this moment; the model without it -2.97 % (-7.11 % at 2 ranks). `head`: the
    head's gradient is still referenced (root_reduce_holds_head_grad)."""
    copies = 2 if gloo else 1
    return (_head_numel(units) * 4 if head else 0) + copies * root + (root // shard if accumulating else 0)


# The first torch whose FSDP2 frees the root's unsharded gradients before the root's reduce-scatter
# (its post-backward takes them out in a helper, _take_unsharded_grads_to_reduce).
HEAD_GRAD_FREED_FROM = (2, 15)


@functools.cache
def _installed_torch() -> str | None:
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return None


def root_reduce_holds_head_grad(torch_version: str | None = None) -> bool:
    """Whether the head's unsharded gradient is still alive at FSDP2's root reduce-scatter under
    `torch_version` (default: the installed torch). torch 2.11 to 2.14 keep it (a real gloo rank's
    peak to the byte with it: dev seed 371 in the test suite under 2.11, 2.13 and 2.14); 2.15
    frees it first: MemTracker on real gloo ranks under 2.15.0 read dev seeds 371, 16 and 7 (2-3
    ranks) at 13,094,132, 9,091,828 and 6,084,056 B, where 2.13 read 13,460,468, 9,370,412 and
    6,651,448 B: without the head's gradient this moment falls below a block's backward, which the
    model already had (+0.04 %, +0.005 %, +0.007 %; with it +2.8 %, +3.1 %, +9.3 %)."""
    found = re.match(r"(\d+)\.(\d+)", torch_version or _installed_torch() or "")
    return found is None or (int(found[1]), int(found[2])) < HEAD_GRAD_FREED_FROM


def _root_pre_backward_bytes(root: int, acts: Activations) -> int:
    """FSDP2's first moment of backward when the root was resharded after forward (the benchmark
    passes reshard_after_forward=True to every fully_shard, the root's too, so torch's "root stays
    gathered" default does not apply): the root's pre-backward all-gather copy-out, its all-gather
    output beside its unsharded parameters, with every activation of forward still saved (the
    loss's backward has not begun; the last block's all-gather output was freed by this copy-out).
    It beats the top of backward where the root (vocab-wide) outweighs the last block and the
    loss's temporaries. Read off MemTracker on dev seed 16 (an untied Mistral-style config with a
    2089-token vocabulary and 2 layers of hidden 120, fsdp2 at 64 simulated ranks, accumulation 2
    reduced last): the peak at the root's pre-backward, 'PARAM' the root's unsharded 2,028,032 B
    plus its shards, the root's 2,028,032 B all-gather output, 'ACT' the counted activations to
    16 B; this moment is 68 B under it, the model without it -2.85 %."""
    return 2 * root + acts.total


def _loss_forward_bytes(root: int, full: Sequence[int], acts: Activations, reshard: bool) -> int:
    """FSDP2's moment at the loss, in forward: every activation, the logits beside their
    log-probabilities (half the loss's temporaries), the root gathered (without resharding every
    unit) and the last block's all-gather output, which no later copy-out frees before backward
    starts. It is the peak of one-layer configs without resharding at hundreds of ranks, where the
    last block's pre-forward (the previous unit's all-gather output is only the root's) is smaller:
    MemTracker on dev seed 83 (a one-layer Gemma, 512 simulated ranks, fsdp2_no_reshard) had
    1,851,792 B of 'act' with no gradient yet, this moment to 144 B; the model without it was -16.9 %."""
    gathered = root + (0 if reshard else sum(full))
    return gathered + full[-1] + acts.total + acts.loss_temp // 2


def phase_bytes(
    parts: dict[str, float],
    units: Sequence[Unit],
    *,
    buckets_at_top: bool,
    deferred: bool,
    tied_head_numel: int = 0,
    logprobs: int = 0,
) -> dict[str, float]:
    """The bytes alive at the top of backward and in the optimizer step, from the peak's parts.

    DDP's buckets are allocated when it wraps the model and live as long (seen on an H100:
    max_memory_allocated was above every tracked tensor by their size at the top of backward).
    CPU's measured peak is MemTracker's, which sees a bucket only from backward's first write
    into it (`buckets_at_top` False: the first micro-batch's top of backward is without them;
    the moment inside the blocks' backward, with them, is `_ddp_block_backward_bytes`; with the
    reduction `deferred`, the head's backward, `_ddp_deferred_head_bytes`, which needs the tied
    head's elements and the log-probabilities' bytes, counted in the activations)."""
    kept = parts["params"] + parts["optimizer"] + parts["buckets"]
    top = kept - (0 if buckets_at_top else parts["buckets"])
    backward = top + parts["gathered"] + parts["activations"] + parts["loss_temp"] + parts["accumulated_grads"]
    if deferred and parts["buckets"]:
        first_bucket = ddp_written_bucket_bytes(units, tied_head_numel)[0]
        backward = max(backward, _ddp_deferred_head_bytes(parts, units, first_bucket, logprobs))
    step = kept + parts["grads"] + parts["optimizer_temp"] + parts.get("tied_grad_copy", 0)
    return {"backward": backward, "optimizer step": step}


# DDP fills its first bucket up to this size (torch's _DEFAULT_FIRST_BUCKET_BYTES), the rest
# up to bucket_cap_mb (torch's default 25 MiB); a bucket is allocated whole at its first write
DDP_FIRST_BUCKET_BYTES = 1024 * 1024
DDP_BUCKET_CAP_BYTES = 25 * 1024 * 1024


def ddp_written_bucket_bytes(
    units: Sequence[Unit], tied_head_numel: int, dtype_bytes: int = 4
) -> tuple[int, list[int], list[int]]:
    """The bytes of DDP's buckets written once the head's gradients are made, and once each
    block's first and all of its gradients are (forward order), each bucket counted whole from
    its first write (MemTracker's view on CPU, where a bucket is seen only from then). DDP rebuilds
    its buckets after the first step in the order the gradients became ready (worker.estimate's
    ddp_ready_order records it): the head (untied) and the root's norms, the blocks from the last,
    each block's parameters in its unit's `ready` order, then the embeddings, reversed (a tied
    one's gradient is ready only after the embedding's backward). Reverse registration order was
    assumed before; it misplaces a llama-style block's norms (hf_units._llama_layer_ready). The
    sizes follow torch's greedy assignment: a bucket closes at the parameter that takes it to its
    cap, so one bucket can hold everything (dev seed 22: one bucket of 1,264,384 B, not the 1 MiB
    cap the head's moment counted, read off DDP's rebuilt_bucket_sizes)."""
    blocks = [u for u in units if not u.is_root]
    ready = ddp_ready_numels(units, tied_head_numel)
    sizes, written = [0], []
    for _, numel in ready:
        if sizes[-1] >= (DDP_FIRST_BUCKET_BYTES if len(sizes) == 1 else DDP_BUCKET_CAP_BYTES):
            sizes.append(0)
        sizes[-1] += numel * dtype_bytes
        written.append(len(sizes) - 1)
    opened = list(accumulate(sizes))
    at = {owner: [opened[written[i]] for i, (o, _) in enumerate(ready) if o == owner] for owner, _ in ready}
    head_bytes = at[-1][-1] if -1 in at else 0
    starts = [at[k][0] if k in at else head_bytes for k in range(len(blocks))]
    # a block's input norm is ready last, once its activations are freed: a bucket it opens is
    # first seen beside the block below's (seed 388: +1.45 % counting it at this block's end)
    ends = [
        at[k][max(0, len(at[k]) - 1 - _trailing_norms(blocks[k]))] if k in at else head_bytes
        for k in range(len(blocks))
    ]
    return head_bytes, starts, ends


def _trailing_norms(unit: Unit) -> int:
    """How many of the unit's last-ready gradients are 1-D (its input norm's weight and bias)."""
    order = list(unit.ready or range(len(unit.shapes))[::-1])
    count = 0
    while count < len(order) and len(unit.shapes[order[-1 - count]]) == 1:
        count += 1
    return count


def ddp_ready_numels(units: Sequence[Unit], tied_head_numel: int) -> list[tuple[int, int]]:
    """(owner, elements) of every parameter in the order backward makes its gradient ready, the
    order DDP rebuilds its buckets in; owner -1 the head and the root's norms (ready first), k the
    k-th block, -2 the embeddings (ready last, the tied one after the blocks' and the head's parts)."""
    blocks = [u for u in units if not u.is_root]
    root = next((u.shapes for u in units if u.is_root), ())
    matrices = [i for i, shape in enumerate(root) if len(shape) == 2]
    # the head is registered after the embedding it may equal in size
    head = max(matrices[::-1], key=lambda i: math.prod(root[i])) if matrices and not tied_head_numel else None
    first = ([head] if head is not None else []) + [i for i, shape in enumerate(root) if len(shape) == 1]
    ready = [(-1, math.prod(root[i])) for i in first]
    for k in reversed(range(len(blocks))):
        order = blocks[k].ready or range(len(blocks[k].shapes))[::-1]
        ready += [(k, math.prod(blocks[k].shapes[i])) for i in order]
    return ready + [(-2, math.prod(root[i])) for i in reversed(range(len(root))) if i not in first]


def _ddp_deferred_head_bytes(
    parts: dict[str, float], units: Sequence[Unit], first_bucket: int, logprobs: int, dtype_bytes: int = 4
) -> float:
    """DDP's moment in the head's backward when the earlier micro-batches skipped the reduction
    (no_sync): the head's gradient is written into the first bucket, which no earlier micro-batch
    wrote, so it is allocated now, whole (`first_bucket`, as rebuilt); beside it the accumulated
    gradients, the head's new vocab x hidden gradient (not yet added into the accumulated one; a
    tied head's waits for the embedding's part) and the activations less the log-probabilities
    (the loss's backward has ended, its temporaries gone). Read off MemTracker (2 ranks, batch 2 x
    accum 2, peak in the head's backward of the last micro-step): dev seed 22 (untied qwen2, one
    1,264,384 B bucket) 'GRAD' the accumulated 1,264,384 B plus the head's new 265,056 B, 'ACT'
    and 'TEMP' the activations less the 192,768 B log-probabilities: this moment is 100 B under
    it (-3.79 % counting the bucket at the 1 MiB cap, no new gradient and the log-probabilities);
    dev seed 0 (untied gemma, first bucket 1,063,440 B) 2,248 B under (+0.11 % before)."""
    kept = parts["params"] + parts["optimizer"] + parts["accumulated_grads"]
    return kept + first_bucket + _head_numel(units) * dtype_bytes + parts["activations"] - logprobs


def _head_numel(units: Sequence[Unit]) -> int:
    """The head's vocab matrix: the root's largest 2-D parameter (0 without a root)."""
    return max((math.prod(s) for u in units if u.is_root for s in u.shapes if len(s) == 2), default=0)


def _largest_numel(unit: Unit) -> int:
    """The unit's largest parameter (a Llama-style block's: an MLP projection)."""
    return max((math.prod(s) for s in unit.shapes), default=0)


def _head_grad_numel(units: Sequence[Unit]) -> int:
    """The head's gradients, made before the blocks' backward: the vocab matrix (tied or not, its
    gradient is alive by then) and the root's 1-D ones."""
    root_shapes = next((u.shapes for u in units if u.is_root), ())
    return _head_numel(units) + sum(math.prod(s) for s in root_shapes if len(s) == 1)


def _ddp_block_backward_bytes(
    parts: dict[str, float],
    units: Sequence[Unit],
    acts: Activations,
    grad_accum: int,
    written: tuple[int, list[int], list[int]] | None = None,
    tied_head_numel: int = 0,
    dtype_bytes: int = 4,
) -> float:
    """DDP's largest moment inside the blocks' backward (0 for every other strategy): the buckets
    (written by then), the residual stream's gradient, the activations of this block and those
    below (the loss's tensors and the final norm's are gone) and the gradients (a second copy
    beside the buckets: DDP's gradients are not bucket views). On CPU, where the measured peak
    sees the buckets only from their first write, this is DDP's backward peak on the Llama-style
    tiny flavors (MemTracker: the last block's backward, 2,441,136 B on qwen2_tiny at 2 ranks,
    against 2,638,184 B for the top of backward with the buckets); every block is tried.

    `written` (ddp_written_bucket_bytes; None: every bucket, held from the start or written by an
    earlier micro-batch) counts only the buckets the gradients made so far wrote: counting every
    bucket at the last block was +4.72 % on dev seed 0 (2 ranks, accumulation 2 reduced last;
    MemTracker's peak in the head's backward, the second of its two 1.06 MB buckets written only
    at block 1). Without accumulation the gradients are the head's, this block's and those above.
    With it, they are the accumulated ones plus the new ones not yet added in place: the block's
    largest (one at a time) and a tied head's vocab x hidden part, which autograd sums with the
    embedding's only after every block (dev seed 3, tied: 'TEMP' held its 1,778,784 B and block
    5's down projection's 383,040 B beside the buckets; -2.05 % without them). A block is then
    tried at its first gradient (every activation of it alive, the buckets its first gradient
    wrote) and after its MLP's backward (those saved tensors freed, every bucket it wrote: dev
    seed 13's peak, the second bucket opened at block 5's post-attention norm, past its MLP)."""
    if not parts["buckets"]:
        return 0
    blocks = [u for u in units if not u.is_root]
    below = sum(acts.per_layer) + acts.under_blocks
    made = _head_grad_numel(units)
    peak = 0.0
    kept = parts["params"] + parts["optimizer"] + acts.stream_grad
    for k in reversed(range(len(blocks))):
        made += blocks[k].numel
        at_first, at_end = (parts["buckets"],) * 2 if written is None else (written[1][k], written[2][k])
        if grad_accum == 1:  # every gradient of the block and those above, every activation (as measured)
            peak = max(peak, kept + at_end + made * dtype_bytes + below)
        else:
            largest = _largest_numel(blocks[k])
            grads = parts["accumulated_grads"] + (tied_head_numel + largest) * dtype_bytes
            peak = max(peak, kept + grads + max(at_first + below, at_end + below - acts.mlp_per_layer))
        below -= acts.per_layer[k]
    return peak


def _fsdp2_full_units(
    strategy: str, units: Sequence[Unit], world_size: int, mesh: tuple[int, int] | None, dtype_bytes: int
) -> tuple[int, list[int]] | None:
    """FSDP2's padded unsharded bytes of the root and of each block (forward order); None where
    the strategy does not gather dim-0 shards (no FSDP2, one rank, no blocks)."""
    row = catalog_strategy(strategy)
    shard = shard_size(strategy, world_size, mesh)
    blocks = [u for u in units if not u.is_root]
    if not row.shards_parameters or shard == 1 or row.layout != "fsdp2_dim0" or not blocks:
        return None
    full = [padded_numel(row.layout, b, shard, dtype_bytes) * dtype_bytes for b in blocks]
    root = next((padded_numel(row.layout, u, shard, dtype_bytes) * dtype_bytes for u in units if u.is_root), 0)
    return root, full


def _block_backward_bytes(
    units: Sequence[Unit],
    root: int,
    full: Sequence[int],
    acts: Activations,
    *,
    shard: int,
    reshard: bool,
    dtype_bytes: int = 4,
    deferred: bool = False,
    tied_head_numel: int = 0,
) -> int:
    """The largest block's backward on FSDP2, at its end (its weight gradients made, before its
    post-backward): the root gathered, the block gathered, the next block's all-gather output
    (prefetched; without resharding everything stays gathered instead; at the block's pre-backward
    copy-out, its own all-gather output instead, with none of its gradients yet), the reduce-scatter input
    of the block above (FSDP2 keeps one until the next post-backward frees it before allocating
    its own, so a block's own reduce-scatter never meets its unsharded parameters), the head's
    unsharded gradients (the vocab matrix and the final norm, made before the blocks' backward),
    the residual stream's gradient, the block's unsharded gradients, the sharded gradients the
    blocks above already reduced (half the model's at 2 ranks: linear_tiny), and the activations of this
    block and those below it (the loss's tensors and the final norm's are gone). Read off
    torch's FSDPMemTracker at 512 simulated ranks (llama_odd_vocab, gpt2_small_odd): there every
    dim 0 pads up to the group size, so these buffers, not the activations, make the peak; a
    middle block (one reduce-scatter input above it) beats the last (none) and the first (fewer
    activations), so every block is tried."""
    blocks = [u for u in units if not u.is_root]
    head_grads = _head_grad_numel(units)
    below = acts.under_blocks
    everything = root + sum(full)
    above = list(accumulate(reversed(full[1:]), initial=0))[::-1]  # above[k]: sum(full[k + 1 :]), linear
    peak = 0
    for k in range(len(blocks)):
        below += acts.per_layer[k]
        reduce_scatter = full[k + 1] if k + 1 < len(blocks) else 0
        others, grads = _gradient_bytes(blocks, k, acts, head_grads, tied_head_numel, dtype_bytes, deferred)
        alive = reduce_scatter + others + acts.stream_grad + below
        in_mlp = _mlp_backward_bytes(blocks[k], acts, dtype_bytes, deferred)
        if not reshard:
            # without resharding the block above's reduce-scatter input was not seen beside this
            # block's gradients (dev seed 19: counting it put the middle block at +6.0 %)
            peak = max(peak, everything + alive - reduce_scatter + max(grads, in_mlp))
            continue
        # the blocks above: their sharded gradients, made (counted with resharding only: without
        # it, adding them put linear_tiny at 2 ranks at +9.6 %, against +1.9 % left out)
        alive += above[k] // shard
        # the block's end (the one below prefetched), and its pre-backward copy-out: its
        # all-gather output and unsharded parameters both alive, before any of its gradients
        end = root + full[k] + (full[k - 1] if k > 0 else 0) + max(grads, in_mlp)
        peak = max(peak, end + alive, root + 2 * full[k] + alive)
    return peak


def _mlp_backward_bytes(block: Unit, acts: Activations, dtype_bytes: int, deferred: bool) -> int:
    """A Llama-style block's moment inside its MLP's backward, beyond what its forward saved: the
    down projection's weight gradient (the block's largest) made and its input (the gate-times-up
    product) freed, while the product's backward makes the gradients of its two inputs beside the
    gradient of its output: three tokens x intermediate temporaries where one saved tensor went,
    half the MLP's four saved tensors more. It beats the block's end (every gradient, the MLP's
    saved tensors freed) where the MLP's activations outweigh the block's parameters: many tokens,
    or an intermediate size many times the hidden size. Read off MemTracker on dev seed 265 (a
    Gemma of hidden 44 and intermediate 626, fsdp2 at 64 simulated ranks): the peak at the last
    block's MLP, in a mul, 'TEMP' three 160,256 B tokens x intermediate tensors and 'GRAD' the
    down projection's 110,176 B beside the head's; the model without this moment was -4.87 %.
    In the last micro-step of a deferred reduction the down projection's new gradient was already
    added in place into the accumulated one (dev seed 205, 512 ranks: 'GRAD' nine accumulated
    68,208 B matrices and no new one beside the three temporaries; counting it was +0.73 %).
    0 where the MLP's saved tensors are not counted apart (not Llama-style)."""
    if not acts.mlp_per_layer:
        return 0
    largest = 0 if deferred else _largest_numel(block)
    return largest * dtype_bytes + acts.mlp_per_layer // 2


def _gradient_bytes(
    blocks: Sequence[Unit],
    k: int,
    acts: Activations,
    head_grads: int,
    tied_head_numel: int,
    dtype_bytes: int,
    deferred: bool,
) -> tuple[int, int]:
    """At block k's backward (_block_backward_bytes): (the other gradients alive beside it, its own
    new gradients)."""
    block = blocks[k]
    if not deferred:
        # the block's gradients less the MLP's saved tensors, which its backward frees before the
        # attention's weight gradients are made: counting both at once was +8.27 % on dev seed 19
        # (fsdp2_no_reshard, 64 ranks; MemTracker's backward peak 14,803,488 B, the model 16,122,504 B)
        return head_grads * dtype_bytes, block.numel * dtype_bytes - acts.mlp_per_layer
    # The last micro-step, reduced last. A tied head's new gradient is not accumulated yet: autograd
    # sums the head's and the embedding's parts first, and the embedding's comes after every block
    # (dev seed 19, tied: its 1,615,680 B vocab x hidden TEMP beside the accumulated GRAD; -6.72 %
    # without). The blocks above were reduced, their accumulated unsharded gradients (counted in
    # the caller's accumulated_grads, the head's too) freed.
    others = (tied_head_numel - sum(b.numel for b in blocks[k + 1 :])) * dtype_bytes
    # This block's new gradients are added in place into the accumulated ones (autograd's
    # AccumulateGrad), one parameter's at a time: the largest is the only new gradient alive, and
    # the block's saved tensors are all still there when its first is made. Counting the block's
    # whole gradients and the head's again was +7.52 % on dev seed 14 (fsdp2, 64 ranks,
    # accumulation 2 reduced last; MemTracker's last-micro-step backward peak at the last block's
    # down projection: GRAD stayed at the accumulated 4,586,112 B, the down projection's new
    # 258,624 B gradient a temporary beside it)
    return others, _largest_numel(block) * dtype_bytes


def _block_forward_bytes(root: int, full: Sequence[int], acts: Activations, *, reshard: bool) -> int:
    """The largest block's pre-forward on FSDP2, at its all-gather's copy-out: the block's
    all-gather output and its unsharded parameters are both alive, and so is the previous unit's
    all-gather output (FSDP2 keeps it until the next copy-out), beside the root and the block
    (without resharding: every unit gathered so far) and the activations of the blocks before
    it. At small world sizes the top of backward (every activation and the loss's tensors) is
    larger; at hundreds of ranks the padded buffers outweigh the activations and, without
    resharding, this moment of the last block is the step's peak (FSDPMemTracker, 512 simulated
    ranks: +0 B on llama_odd_vocab and gpt2_small_odd), so both moments are modelled and the
    caller takes the max."""
    before = acts.under_blocks
    peak = 0
    so_far = list(accumulate(full))  # sum(full[: k + 1]) without summing again per block
    for k, size in enumerate(full):
        gathered = root + (size if reshard else so_far[k])
        previous_all_gather = full[k - 1] if k > 0 else root
        peak = max(peak, gathered + size + previous_all_gather + before)
        before += acts.per_layer[k]
    return peak
