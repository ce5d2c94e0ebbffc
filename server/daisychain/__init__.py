"""DaisyChain: train one small language model together on the devices you already own.

Subpackages, one concept each (docs/ARCHITECTURE.md has the whole map):
    numerics   the numerical contract (docs/NUMERICS.md): quantization, exact int8 GEMM,
               pinned reductions, the project's own exp/log, the seeded integer PRNG
    model      the GPT-style decoder, forward and backward by hand on the contract
    tokenizer  byte-level BPE with an ASCII-class pre-splitter
    gpu        the WGSL kernels from Python: gates, audit, probe, chains (docs/KERNELS.md)
    cpu        the CPU backends: int8 products (onnxruntime) and fused passes (numba), gated
    p2p        peer-to-peer training over WebRTC data channels (docs/PROTOCOL.md)
    outer      the outer loop's arithmetic for low-communication runs (docs/OUTER.md)
    peer       the headless peer, ``python -m daisychain.peer``
    server     the aiohttp app: static files, signaling, rooms, /data (docs/SERVER.md)
    wire       what peers and the server say to each other, declared once for both
    corpus     the built-in training corpus
    bench      ``daisychain bench NAME`` (docs/BENCHMARKS.md): a person measuring their own
               devices; ``bench.rig`` is the stage the benchmarks run on (the tests use it too)
Modules at this level are the single-process pieces: ``optim`` (deterministic AdamW and
gradient clipping), ``training`` (one replica's step), ``checkpoint``, ``generate``, and one
module per ``daisychain`` subcommand (``cli`` finds them by name).
"""

__version__ = "0.1.0"
