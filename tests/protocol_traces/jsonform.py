"""Events and effects as JSON: the body of a conformance trace (tests/vectors/README.md,
"Protocol traces"). Binary data is base64; payloads an effect sends are named by length and
SHA-256 (their bytes are the machine's output, and the framing around them, deflate included,
is the shell's)."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
from typing import Any

from daisychain.p2p.machine import effects as fx
from daisychain.p2p.machine import events as ev
from daisychain.wire import messages

Json = dict[str, Any]


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def unb64(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"), validate=True)


def message_json(m: messages.Message) -> Json:
    obj: Json = json.loads(messages.encode(m))
    return obj


def event_to_json(e: ev.Event) -> Json:
    at: Json = {"at": e.now}
    if isinstance(e, ev.ChannelOpened):
        return {**at, "event": "channel-open", "peer": e.peer}
    if isinstance(e, ev.ChannelClosed):
        return {**at, "event": "channel-closed", "peer": e.peer}
    if isinstance(e, ev.PeerLeft):
        return {**at, "event": "peer-left", "peer": e.peer}
    if isinstance(e, ev.MessageReceived):
        return {**at, "event": "message", "peer": e.peer, "text": e.text}
    if isinstance(e, ev.FrameReceived):
        return {**at, "event": "frame", "peer": e.peer, "data": b64(e.data)}
    if isinstance(e, ev.ComputeDone):
        return {**at, "event": "compute-done", "step": e.step, "round": e.round, "loss": e.loss,
                "probe": e.probe, "payloads": [b64(p) for p in e.payloads],
                "seq_s": e.seq_s}  # fmt: skip
    if isinstance(e, ev.ComputePartial):
        return {**at, "event": "compute-partial", "step": e.step, "round": e.round,
                "chunk": e.chunk, "payload": b64(e.payload)}  # fmt: skip
    if isinstance(e, ev.ComputeFailed):
        return {**at, "event": "compute-failed", "step": e.step, "round": e.round,
                "error": e.error}  # fmt: skip
    if isinstance(e, ev.Timer):
        return {**at, "event": "timer"}
    if isinstance(e, ev.UserLead):
        return {**at, "event": "lead", "config": message_json(e.config),
                "min_peers": e.min_peers}  # fmt: skip
    if isinstance(e, ev.UserStop):
        return {**at, "event": "user-stop", "reason": e.reason}
    if isinstance(e, ev.UserLeave):
        return {**at, "event": "user-leave", "reason": e.reason}
    if isinstance(e, ev.UserSave):
        return {**at, "event": "user-save"}
    if isinstance(e, ev.UserPrivateData):
        return {**at, "event": "user-private-data", "on": e.on}
    assert isinstance(e, ev.SignalingLost)
    return {**at, "event": "signaling-lost", "reason": e.reason}


def event_from_json(obj: Json) -> ev.Event:
    now = float(obj["at"])
    kind = obj["event"]
    if kind == "channel-open":
        return ev.ChannelOpened(now, obj["peer"])
    if kind == "channel-closed":
        return ev.ChannelClosed(now, obj["peer"])
    if kind == "peer-left":
        return ev.PeerLeft(now, obj["peer"])
    if kind == "message":
        return ev.MessageReceived(now, obj["peer"], obj["text"])
    if kind == "frame":
        return ev.FrameReceived(now, obj["peer"], unb64(obj["data"]))
    if kind == "compute-done":
        payloads = tuple(unb64(p) for p in obj["payloads"])
        return ev.ComputeDone(now, obj["step"], obj["round"], float(obj["loss"]), payloads,
                              obj["probe"], float(obj["seq_s"]))  # fmt: skip
    if kind == "compute-partial":
        return ev.ComputePartial(now, obj["step"], obj["round"], obj["chunk"],
                                 unb64(obj["payload"]))  # fmt: skip
    if kind == "compute-failed":
        return ev.ComputeFailed(now, obj["step"], obj["round"], obj["error"])
    if kind == "timer":
        return ev.Timer(now)
    if kind == "lead":
        config = messages.parse(json.dumps(obj["config"]))
        assert isinstance(config, messages.Config), "a lead event carries a config message"
        return ev.UserLead(now, config, obj["min_peers"])
    if kind == "user-stop":
        return ev.UserStop(now, obj["reason"])
    if kind == "user-leave":
        return ev.UserLeave(now, obj["reason"])
    if kind == "user-save":
        return ev.UserSave(now)
    if kind == "user-private-data":
        return ev.UserPrivateData(now, bool(obj["on"]))
    if kind == "signaling-lost":
        return ev.SignalingLost(now, obj["reason"])
    raise ValueError(f"unknown trace event {kind!r}")


def effect_to_json(f: fx.Effect) -> Json:
    if isinstance(f, fx.SendMessage):
        return {"effect": "send-message", "peer": f.peer, "message": message_json(f.message)}
    if isinstance(f, fx.SendPayload):
        return {
            "effect": "send-payload", "peer": f.peer, "kind": int(f.kind), "step": f.step,
            "round": f.round, "chunk": f.chunk, "transfer": f.transfer, "deflate": f.deflate,
            "bytes": len(f.payload), "sha256": hashlib.sha256(f.payload).hexdigest(),
        }  # fmt: skip
    if isinstance(f, fx.Close):
        return {"effect": "close", "peer": f.peer}
    if isinstance(f, fx.Compute):
        return {"effect": "compute", "step": f.step, "round": f.round, "rank": f.rank,
                "shares": list(f.shares)}  # fmt: skip
    if isinstance(f, fx.Save):
        return {"effect": "save", "step": f.step}
    if isinstance(f, fx.StepApplied):
        body = dataclasses.asdict(f)
        body["roster"] = list(f.roster)
        body["shares"] = list(f.shares)
        return {"effect": "step-applied", **body}
    assert isinstance(f, fx.Finished)
    return {"effect": "finished", **dataclasses.asdict(f.outcome)}
