"""The same GPT architecture in PyTorch float32 eager mode: the baseline for ``bench step``.

Only used by benchmarks, and only when torch is importable (``pip install torch==2.13.0`` gives the
CPU build). It mirrors docs/MODEL.md's architecture — tied embedding, learned positions, RMSNorm
with gains, causal attention, ReLU MLP, no biases — with ordinary float math and autograd, so the
comparison is "the contract's exact int8 training" against "what a practitioner would write".
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from daisychain.model.config import ModelConfig


class _RMSNorm(nn.Module):
    def __init__(self, width: int, eps: float) -> None:
        super().__init__()
        self.g = nn.Parameter(torch.ones(width))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.g


class _Block(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        c = cfg.width
        self.heads = cfg.heads
        self.n1 = _RMSNorm(c, float(cfg.norm_eps))
        self.wqkv = nn.Linear(c, 3 * c, bias=False)
        self.wo = nn.Linear(c, c, bias=False)
        self.n2 = _RMSNorm(c, float(cfg.norm_eps))
        self.w1 = nn.Linear(c, cfg.hidden, bias=False)
        self.w2 = nn.Linear(cfg.hidden, c, bias=False)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        b, t, c = h.shape
        q, k, v = self.wqkv(self.n1(h)).split(c, dim=-1)  # (B, T, C) each
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, T, hd)
        h = h + self.wo(o.transpose(1, 2).reshape(b, t, c))
        out: torch.Tensor = h + self.w2(F.relu(self.w1(self.n2(h))))
        return out


class TorchGPT(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.wte = nn.Embedding(cfg.vocab_size, cfg.width)
        self.wpe = nn.Embedding(cfg.seq_len, cfg.width)
        self.blocks = nn.ModuleList(_Block(cfg) for _ in range(cfg.layers))
        self.nf = _RMSNorm(cfg.width, float(cfg.norm_eps))
        for p in self.parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        h = self.wte(x) + self.wpe.weight[: x.shape[1]]
        for block in self.blocks:
            h = block(h)
        logits = self.nf(h) @ self.wte.weight.T  # tied output layer
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), y.reshape(-1))


def make_trainer(cfg: ModelConfig, lr: float, seed: int) -> tuple[TorchGPT, Any]:
    torch.manual_seed(seed)
    model = TorchGPT(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.1)
    return model, opt
