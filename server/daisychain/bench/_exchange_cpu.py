"""The exchange's CPU cost per MB, stage by stage (``daisychain bench mesh``, part ``cpu``).

What a peer spends to move one MB of quantized gradient through one exchange, measured with
the process's CPU clock on one real gradient of the preset (its compressibility is a real
gradient's): on the sending side quantizing (``codec.encode``), framing with the CRC
(``frames.fragment``), deflate; on the receiving side reassembly with the CRC check, inflate,
dequantizing (``codec.decode``) and the share-weighted reduce of three contributions
(``allreduce.reduce_chunk``, per MB of one contribution); and the data channel itself: a raw
aiortc channel between two connections in this process, its CPU seconds halved per side. Each
figure is the best of a few repetitions (the least disturbed by other work on the machine).
``send_side``/``receive_side`` add them up with and without deflate, so what deflate costs and
what it saves in channel time (its byte ratio times the channel's cost) read side by side.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from daisychain.p2p import allreduce
from daisychain.wire import codec, frames

REPEATS = 3


BUFFER_HIGH = 4 * 1024 * 1024  # bytes queued in a channel before a raw sender waits


async def send_paced(chan: Any, total: int) -> None:
    """Send ``total`` bytes of zeros on the aiortc channel ``chan`` in frame-sized messages,
    waiting while more than BUFFER_HIGH is queued (flow control: let SCTP drain)."""
    block = bytes(frames.MAX_FRAME_BYTES)
    sent = 0
    while sent < total:
        if chan.bufferedAmount > BUFFER_HIGH:
            await asyncio.sleep(0.001)
            continue
        part = block[: min(len(block), total - sent)]
        chan.send(part)
        sent += len(part)


async def raw_channel_mb_s(total_mb: float) -> float:
    """One-direction throughput of a bare aiortc channel (48 KiB messages) on this machine."""
    from aiortc import RTCConfiguration, RTCDataChannel, RTCPeerConnection

    a = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    b = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    chan = a.createDataChannel("raw", ordered=True)
    got = 0
    total = int(total_mb * 1e6)
    done = asyncio.Event()
    opened = asyncio.Event()
    chan.on("open", opened.set)

    @b.on("datachannel")
    def on_channel(ch: RTCDataChannel) -> None:
        @ch.on("message")
        def on_message(msg: bytes) -> None:
            nonlocal got
            got += len(msg)
            if got >= total:
                done.set()

    await a.setLocalDescription(await a.createOffer())
    await b.setRemoteDescription(a.localDescription)
    await b.setLocalDescription(await b.createAnswer())
    await a.setRemoteDescription(b.localDescription)
    await asyncio.wait_for(opened.wait(), 20)
    t0 = time.perf_counter()
    await send_paced(chan, total)
    await asyncio.wait_for(done.wait(), 120)
    seconds = time.perf_counter() - t0
    await a.close()
    await b.close()
    return got / seconds / 1e6


def _best_cpu(work: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(REPEATS):
        c0 = time.process_time()
        work()
        best = min(best, time.process_time() - c0)
    return best


def stages(flat: np.ndarray[Any, np.dtype[np.float32]]) -> dict[str, Any]:
    """CPU ms per MB of payload for each stage, on the gradient ``flat`` (whole blocks)."""
    payload, values = codec.encode(flat)
    mb = len(payload) / 1e6
    blocks = flat.size // codec.BLOCK

    def fragments(deflate: bool) -> list[bytes]:
        return list(frames.fragment(frames.FrameKind.CONTRIBUTION, payload, transfer=1, step=1,
                                    deflate=deflate))  # fmt: skip

    plain, packed = fragments(False), fragments(True)

    def reassemble(parts: list[bytes]) -> object:
        r = frames.Reassembler(lambda kind: len(payload))
        out = None
        for f in parts:
            out = r.feed(f)
        assert out is not None and out.data == payload, "reassembly lost the payload"
        return out

    framing = _best_cpu(lambda: fragments(False))
    reassembly = _best_cpu(lambda: reassemble(plain))
    ms = {
        "quantize": _best_cpu(lambda: codec.encode(flat)),
        "framing_crc": framing,
        "deflate": max(0.0, _best_cpu(lambda: fragments(True)) - framing),
        "reassembly_crc": reassembly,
        "inflate": max(0.0, _best_cpu(lambda: reassemble(packed)) - reassembly),
        "dequantize": _best_cpu(lambda: codec.decode(payload, blocks)),
        "reduce_3": _best_cpu(lambda: allreduce.reduce_chunk([values] * 3, [1, 1, 1], 3)),
    }
    return {
        "payload_mb": round(mb, 3),
        "deflate_byte_ratio": round(sum(map(len, packed)) / sum(map(len, plain)), 4),
        "cpu_ms_per_mb": {k: round(1000 * v / mb, 2) for k, v in ms.items()},
    }


async def channel_cpu_ms_per_mb(total_mb: float) -> dict[str, float]:
    """A raw aiortc channel in this process: CPU ms per MB for both ends, and its throughput."""
    c0 = time.process_time()
    mb_s = await raw_channel_mb_s(total_mb)
    cpu = time.process_time() - c0
    # The connection set-up is in the CPU figure too: a small, fixed part for MBs of traffic.
    return {"both_ends": round(1000 * cpu / total_mb, 2), "mb_s": round(mb_s, 2)}


def profile(flat: np.ndarray[Any, np.dtype[np.float32]], channel_mb: float) -> dict[str, Any]:
    """``stages`` plus the channel, and the per-side sums with and without deflate."""
    out = stages(flat)
    channel = asyncio.run(channel_cpu_ms_per_mb(channel_mb))
    per_side = channel["both_ends"] / 2
    c = out["cpu_ms_per_mb"]
    ratio = out["deflate_byte_ratio"]
    send = c["quantize"] + c["framing_crc"]
    receive = c["reassembly_crc"] + c["dequantize"] + c["reduce_3"]
    out["data_channel_ms_per_mb_per_side"] = round(per_side, 2)
    out["raw_channel_mb_s"] = channel["mb_s"]
    out["send_side_ms_per_mb"] = {
        "without_deflate": round(send + per_side, 2),
        "with_deflate": round(send + c["deflate"] + ratio * per_side, 2),
    }
    out["receive_side_ms_per_mb"] = {
        "without_deflate": round(receive + per_side, 2),
        "with_deflate": round(receive + c["inflate"] + ratio * per_side, 2),
    }
    out["data_channel_share_of_send_and_receive"] = round(
        2 * per_side / (send + receive + 2 * per_side), 3
    )
    return out
