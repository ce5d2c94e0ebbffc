"""Who takes part in a training peer's run (docs/PROTOCOL.md, "Run lifecycle" and "Join,
leave, failover"): leading a new run, joining one from the leader's config, greeting late
peers, and dropping peers that leave, with failover when the leader is one of them."""

from __future__ import annotations

import logging
import secrets
import time
from typing import TYPE_CHECKING

from daisychain import checkpoint, training
from daisychain.model.config import ModelConfig, preset
from daisychain.optim import AdamWConfig
from daisychain.p2p import checkpoints, messages, rosters, run, runconfig
from daisychain.p2p.run import Phase

if TYPE_CHECKING:
    from daisychain.p2p.node import Node

log = logging.getLogger("daisychain.p2p.node")


def model_config(cfg: messages.Config) -> ModelConfig:
    spec = cfg.model
    return ModelConfig(
        vocab_size=spec.vocab_size, width=spec.width, layers=spec.layers, heads=spec.heads,
        seq_len=spec.seq_len, batch=spec.batch, mlp_mult=spec.mlp_mult,
    )  # fmt: skip


def start_leading(node: Node) -> None:
    lead = node.lead
    assert lead is not None
    node.leader = node.id
    if lead.resume:
        ck = checkpoint.load(
            lead.resume, tokenizer_sha256=node.tokenizer_sha256, vocab_size=node.vocab_size
        )
        state = ck.state
    else:
        changes = {"vocab_size": node.vocab_size}
        if lead.batch:
            changes["batch"] = lead.batch
        if lead.seq_len:
            changes["seq_len"] = lead.seq_len
        mc = preset(lead.preset, **changes)
        opt = AdamWConfig(lr=lead.lr, warmup_steps=min(lead.warmup, max(lead.steps - 1, 0)))
        state = training.init(mc, opt, lead.seed)
    node._set_state(state)
    mc, opt = state.cfg, state.opt_cfg
    node.config = messages.Config(
        run=secrets.token_hex(8),
        preset=None if lead.resume else lead.preset,
        model=messages.ModelSpec(
            vocab_size=mc.vocab_size,
            width=mc.width,
            layers=mc.layers,
            heads=mc.heads,
            seq_len=mc.seq_len,
            batch=mc.batch,
            mlp_mult=mc.mlp_mult,
        ),
        optim=messages.OptimSpec(opt.lr, opt.warmup_steps, opt.weight_decay, opt.clip),
        steps=lead.steps,
        seed=state.seed,
        data="builtin",
        tokenizer_sha256=node.tokenizer_sha256,
        resume_step=state.step,
        resume_hash=node.my_hash if state.step > 0 else None,
    )
    try:  # the leader trains its run too: the followers' rules and its own caps apply
        runconfig.parse(
            node.config, tokenizer_sha256=node.tokenizer_sha256, vocab_size=node.vocab_size,
            limits=node.limits,
        )  # fmt: skip
    except runconfig.Incompatible as exc:
        node._stop("error", f"cannot lead this run: {exc.message}; {exc.hint}", code=exc.code)
    node.phase.transition(Phase.CONFIGURED, "leading")
    node._broadcast(node.config)


def on_config(node: Node, peer: str, cfg: messages.Config) -> None:
    if node.lead is not None:
        node._reject(peer, "wrong-run", "this peer leads its own run")
        return
    if node.config is not None:
        if cfg != node.config:
            node._reject(peer, "wrong-run", "a second, different run configuration")
        return
    try:
        accepted = runconfig.parse(
            cfg, tokenizer_sha256=node.tokenizer_sha256, vocab_size=node.vocab_size,
            limits=node.limits,
        )  # fmt: skip
    except runconfig.Incompatible as exc:
        # Refused, not fatal: the follower stays in the lobby for the next run.
        node._reject(peer, exc.code, exc.message, exc.hint)
        return
    node.config = cfg
    node.leader = peer
    node._set_shapes(accepted.model)
    node.phase.transition(Phase.CONFIGURED, f"config from {peer}")
    if cfg.resume_step == 0:
        node._set_state(training.init(accepted.model, accepted.optim, cfg.seed))
        node._send(peer, ready(node))
    else:
        checkpoints.request_sync(node)


def ready(node: Node) -> messages.Ready:
    assert node.config is not None and node.state is not None
    peers = sorted((node.mesh.open_peers() & node.greeted) - node.gone)
    return messages.Ready(node.config.run, node.state.step, node.my_hash, peers)


def on_greeted(node: Node, peer: str) -> None:
    if node.is_leader and node.config is not None:
        # A late peer learns the run from the leader: config, then the current roster (a
        # peer not in it asks for the state and enters the roster after the checkpoint).
        node._send(peer, node.config)
        if node.roster is not None:
            r = node.roster
            node._send(peer, messages.Roster(node.config.run, r.step, r.round, list(r.peers)))


def peer_gone(node: Node, peer: str, why: str) -> None:
    if peer in node.gone:
        return
    node.gone.add(peer)
    node.ready.pop(peer, None)
    node.sync_wanted.pop(peer, None)
    log.info("%s: peer %s gone (%s)", node.name, peer, why)
    now = time.monotonic()
    w = node._current_work()
    if w is not None and peer in w.roster.peers and not w.applied:
        w.repair_at = min(w.repair_at, now)
        w.deadline = min(w.deadline, now + node.timers.repair_after_s)
    if peer == node.leader:
        _leader_gone(node)


def _leader_gone(node: Node) -> None:
    if node.roster is None:
        node._stop("error", "the leader left before the first step; start the run again")
    assert node.roster is not None
    new = run.successor(node.roster.peers, node.gone)
    old, node.leader = node.leader, new
    log.info("%s: leader %s gone; successor %s", node.name, old, new)
    if new is None:
        node._stop("error", "every peer of the last roster left")
    if node.is_leader:
        w = node._current_work()
        if w is not None:
            w.deadline = min(w.deadline, time.monotonic() + node.timers.repair_after_s)
    else:
        if node.awaiting_checkpoint:
            node.awaiting_checkpoint = False
            checkpoints.request_sync(node)
        held = node.held_rosters.pop(new, None) if new is not None else None
        if held is not None and (node.roster is None or held.step >= node.roster.step):
            rosters.accept_roster(node, held)
