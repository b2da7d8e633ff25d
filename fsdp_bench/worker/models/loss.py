"""The `chunked` loss of the language models: mean token cross-entropy over the vocabulary from
the last hidden states and the output head, in token slices, with its gradients made in forward.

The models' own (`full`) loss makes the head's logits for every token at once: their fp32 copy and
log-probabilities are alive at the loss, and backward adds two more vocab-wide fp32 tensors; at
llama3_1b's vocabulary (128,256) that is 23.5 GiB of a batch of 8 x 2048 tokens.

In slices (`ChunkedCrossEntropy`), forward takes one slice of tokens at a time: its logits, their
softmax and the gradient of the loss with respect to them (softmax minus the one-hot target, over
the token count), which it turns at once into the slice's rows of the hidden states' gradient and
adds into the head weight's gradient. Only those two gradients (tokens x hidden, vocab x hidden)
are kept for backward, which scales and returns them. Same FLOPs as the full loss (the head's
backward matmuls run in forward); the vocab-wide tensors are one slice's. The same construction
as the fused linear cross-entropy kernels (e.g. Liger's), in plain torch ops.
"""

from __future__ import annotations

import torch


class ChunkedCrossEntropy(torch.autograd.Function):
    """loss = mean over tokens of cross_entropy(head(hidden), targets), logits in fp32, optionally
    soft-capped as Gemma 2's (cap x tanh(logits / cap))."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, chunks: int, softcap: float | None):
        tokens = targets.numel()
        grad_hidden = torch.empty_like(hidden)
        # accumulated over the slices in fp32 (a low-precision sum of eight would lose bits the
        # full loss's single matmul keeps), kept in the weight's dtype
        grad_weight = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)
        grad_bias = torch.zeros(bias.shape, dtype=torch.float32, device=bias.device) if bias is not None else None
        total = torch.zeros((), dtype=torch.float32, device=hidden.device)
        slices = zip(hidden.chunk(chunks), targets.chunk(chunks), grad_hidden.chunk(chunks))
        for part, part_targets, part_grad_hidden in slices:
            logits = torch.nn.functional.linear(part, weight, bias).float()
            if softcap:
                capped = torch.tanh(logits / softcap)
                logits = capped * softcap
            lse = torch.logsumexp(logits, dim=-1)
            total += (lse - logits.gather(1, part_targets[:, None]).squeeze(1)).sum()
            grad = logits.sub_(lse[:, None]).exp_()  # the softmax, in place of the logits
            grad[torch.arange(len(part_targets), device=grad.device), part_targets] -= 1.0
            if softcap:
                grad *= 1 - capped * capped
            grad = grad.div_(tokens)
            part_grad_hidden.copy_(grad.to(weight.dtype) @ weight)  # a view of grad_hidden's rows
            grad_weight.addmm_(grad.t(), part.float())
            if grad_bias is not None:
                grad_bias += grad.sum(0)
        grad_weight = grad_weight.to(weight.dtype)
        grad_bias = grad_bias.to(bias.dtype) if grad_bias is not None else None
        ctx.save_for_backward(grad_hidden, grad_weight, grad_bias)
        return total / tokens

    @staticmethod
    def backward(ctx, grad_loss):
        grad_hidden, grad_weight, grad_bias = ctx.saved_tensors
        bias = grad_bias * grad_loss.to(grad_bias.dtype) if grad_bias is not None else None
        return (
            grad_hidden * grad_loss.to(grad_hidden.dtype),
            grad_weight * grad_loss.to(grad_weight.dtype),
            bias,
            None,
            None,
            None,
        )


def chunked_cross_entropy(
    hidden: torch.Tensor, head: torch.nn.Linear, targets: torch.Tensor, *, chunks: int, softcap: float | None = None
) -> torch.Tensor:
    """Mean cross-entropy of `head(hidden)` against `targets` over `chunks` token slices."""
    flat = hidden.reshape(-1, hidden.size(-1))
    return ChunkedCrossEntropy.apply(flat, head.weight, head.bias, targets.reshape(-1), chunks, softcap)
