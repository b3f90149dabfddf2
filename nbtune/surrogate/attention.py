"""µP attention for the surrogate: logits scaled by 1/d instead of 1/sqrt(d) (Hydro §4.1).

With the target as the base shape, the target keeps PyTorch's ``1/sqrt(d0)``
and a surrogate with head size ``d = d0/S`` gets ``sqrt(d0)/d``: the µP ``1/d``
rule normalised so the two agree at the target's width (mup's ``attn_mult``).
The query projection starts at zero, as Hydro does.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["MuMultiheadAttention"]


class ShrinkError(ValueError):
    """The model cannot be shrunk as given; the message says what to change.

    Defined here, with the one layer the shrinker swaps in, so the shrinker
    imports this module and not the other way round.
    """


class MuMultiheadAttention(nn.MultiheadAttention):
    """An ``nn.MultiheadAttention`` whose attention logits are multiplied by ``logit_scale``.

    It is still an ``nn.MultiheadAttention`` (same parameters, same call), so
    code and fusion that know the standard layer know this one; only the
    scaling of ``q . k`` differs. ``need_weights`` returns no weights.
    """

    logit_scale: float | None = None

    @classmethod
    def shrunk(cls, name: str, mod: nn.MultiheadAttention, embed_dim: int,
               parametrize: bool) -> nn.MultiheadAttention:

        if not (mod.kdim == mod.vdim == mod.embed_dim) or mod.bias_k is not None or mod.add_zero_attn:
            raise ShrinkError(f"layer {name!r}: only self-attention style MultiheadAttention "
                              "(kdim = vdim = embed_dim, no add_bias_kv / add_zero_attn) shrinks")
        if embed_dim % mod.num_heads:
            raise ShrinkError(f"layer {name!r}: embed_dim {embed_dim} of the surrogate is not "
                              f"divisible by num_heads={mod.num_heads}; use another scale")
        dev = mod.in_proj_weight.device
        kind = cls if parametrize else nn.MultiheadAttention
        new = kind(embed_dim, mod.num_heads, dropout=mod.dropout,
                   bias=mod.in_proj_bias is not None, batch_first=mod.batch_first, device=dev)
        if parametrize:
            d0, d = mod.head_dim, new.head_dim
            new.logit_scale = math.sqrt(d0) / d
            with torch.no_grad():
                new.in_proj_weight[:embed_dim].zero_()  # the query projection
        return new

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                key_padding_mask: torch.Tensor | None = None, need_weights: bool = True,
                attn_mask: torch.Tensor | None = None, average_attn_weights: bool = True,
                is_causal: bool = False) -> tuple[torch.Tensor, Any]:
        if self.logit_scale is None:
            return super().forward(query, key, value, key_padding_mask, need_weights,
                                   attn_mask, average_attn_weights, is_causal)
        if not self.batch_first:
            query, key, value = (t.transpose(0, 1) for t in (query, key, value))
        b, lq, e = query.shape
        h, d = self.num_heads, self.head_dim
        ws = self.in_proj_weight.chunk(3)
        bs = self.in_proj_bias.chunk(3) if self.in_proj_bias is not None else (None,) * 3
        q, k, v = (F.linear(t, w, bb).view(b, -1, h, d).transpose(1, 2)
                   for t, w, bb in zip((query, key, value), ws, bs, strict=True))
        mask = None
        if attn_mask is not None:  # MHA: True = masked out; SDPA: additive float mask
            mask = (torch.zeros_like(attn_mask, dtype=q.dtype).masked_fill(attn_mask, -math.inf)
                    if attn_mask.dtype == torch.bool else attn_mask.to(q.dtype))
        if key_padding_mask is not None:
            kpm = torch.zeros(key_padding_mask.shape, dtype=q.dtype, device=q.device)
            kpm = kpm.masked_fill(key_padding_mask.bool(), -math.inf)[:, None, None, :]
            mask = kpm if mask is None else mask + kpm
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=self.dropout if self.training else 0.0,
            is_causal=is_causal and mask is None, scale=self.logit_scale)
        out = self.out_proj(out.transpose(1, 2).reshape(b, lq, e))
        if not self.batch_first:
            out = out.transpose(0, 1)
        return out, None
