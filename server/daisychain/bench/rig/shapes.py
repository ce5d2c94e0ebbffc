"""The integer products the GEMM benchmarks time: the ``small`` preset's, and a quick version."""

from __future__ import annotations

Shape = tuple[str, int, int, int]  # (name, M, K, N)

# (name, M, K, N) of the small preset's products (vocabulary 2048, see
# ``bench kernels``).
SMALL_SHAPES: list[Shape] = [
    ("qkv", 1024, 256, 768),
    ("mlp_up", 1024, 256, 1024),
    ("mlp_down", 1024, 1024, 256),
    ("logits", 1024, 256, 2048),
]
# --quick: the same four products at 1/16 of M and 1/8 of K and N (every backend still runs).
QUICK_SHAPES: list[Shape] = [
    ("qkv", 64, 32, 96),
    ("mlp_up", 64, 32, 128),
    ("mlp_down", 64, 128, 32),
    ("logits", 64, 32, 256),
]
