"""DaisyChain: train one small language model together on the devices you already own.

Subpackages, one concept each:
    numerics   the numerical contract (docs/NUMERICS.md): quantization, exact int8 GEMM,
               pinned reductions, the project's own exp/log, the seeded integer PRNG
    model      the GPT-style decoder, forward and backward by hand on the contract
    optim      deterministic AdamW and gradient clipping
    tokenizer  byte-level BPE with an ASCII-class pre-splitter
    server     the aiohttp app: static files, signaling, rooms, /data
"""

__version__ = "0.1.0"
