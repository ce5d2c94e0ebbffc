"""Configuration of the DaisyChain server: one frozen dataclass per concern.

The command line (``main.py``) fills these from flags; tests build them directly with short
timers and small limits. Every default below is the production value and says why it is what it
is, so an operator reading ``docs/SERVER.md`` and a reader of this file see the same numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from daisychain import datanames
from daisychain.wire.ice import IceConfig

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8787

# Hugging Face resolve endpoint for FineWeb-Edu. The revision is pinned so every deployment reads
# the same bytes; it is configurable (--data-revision) because it cannot be verified offline.
FINEWEB_BASE_URL = "https://huggingface.co"
FINEWEB_REPO = "HuggingFaceFW/fineweb-edu"
FINEWEB_REVISION = "87f09149ef4734204d70ed1d046ddc9ca3f2b8f9"
FINEWEB_SHARDS: tuple[str, ...] = tuple(f"sample/10BT/{i:03d}_00000.parquet" for i in range(14))


@dataclass(frozen=True)
class SignalingLimits:
    """Limits that keep one misbehaving client from hurting the others."""

    # SDP offers are 2-10 KB; 64 KB leaves room for large candidate sets and nothing more.
    max_message_bytes: int = 64 * 1024
    # Broadcasts fan out to the whole group, so they are held to control-message size.
    max_broadcast_bytes: int = 4 * 1024
    # A browser joining a group of 16 sends ~15 offers plus ~10 ICE candidates each in about a
    # second: a burst of 200 and 50 messages/s sustained cover that with margin.
    rate_per_s: float = 50.0
    burst: int = 200
    # Each rejected message (malformed, unknown, too large, over the rate) costs a strike; strikes
    # refill slowly. Out of strikes -> the connection is closed with code 4429.
    max_strikes: int = 20
    strike_refill_s: float = 3.0
    # aiohttp sends a WebSocket ping this often and drops the peer if no pong comes back.
    heartbeat_s: float = 20.0
    # A connection that never says hello is closed: it holds a socket and learns nothing.
    hello_timeout_s: float = 15.0
    # Messages queued for one client, and their bytes (JSON is ASCII: characters are bytes). The
    # outbox holds only what the kernel's socket buffer (hundreds of KB on a live link) could
    # not take, so a reading client never comes near; past either bound the client is not
    # reading and its socket is aborted at once, its queue freed. 1 MiB is 16 of the largest
    # signals; without the byte bound 1024 such signals pinned 64 MB per client.
    outbox_limit: int = 1024
    outbox_limit_bytes: int = 1 << 20
    # A polite close (our close frame, then the client's) that has not finished by then is cut
    # off: a client that does not read would otherwise hold the socket, and its memory, forever.
    close_timeout_s: float = 5.0
    # Automatic groups past this size are refused with a hint to use a private room.
    max_group_size: int = 256
    # Join requests waiting for one host at a time. When they are full, a request from a
    # network with fewer waiting takes the place of one from the most crowded (counted by site,
    # an IPv4 /24 or IPv6 /48: rooms.py); any other is refused, and the host is told how many
    # were, at most once per ``refused_notice_s`` however fast refusals come.
    max_pending: int = 16
    refused_notice_s: float = 1.0
    # How long a join request waits for the host before the requester is told it timed out.
    join_timeout_s: float = 120.0
    # Per client address (an IPv4 address, an IPv6 /64: grouping.network_key), so one machine
    # cannot spend what the server has for everyone:
    # - open WebSockets. A classroom behind one NAT (20-40 devices, each with a tab or two)
    #   fits; more than that from one address is a script, and 64 sockets each holding at most
    #   an outbox and a frame bound what one address can pin (~80 MB worst case, usually <5 MB).
    max_connections_per_address: int = 64
    # - hellos: a classroom loading the page at once (40 hellos) fits the burst; then 2/s, which
    #   reloads never reach. A flood used to squat 152 room codes a second.
    hello_burst: int = 48
    hellos_per_s: float = 2.0
    # - join requests (hellos into a room that has members), per address and room: a host
    #   reads each one, so after a burst the size of a room's waiting list (a class behind one
    #   NAT joining its room at once) a network may ask that room once per 5 s; a
    #   deny-and-reconnect loop used to show a host 68 requests a second.
    join_request_burst: int = 16
    join_requests_per_s: float = 0.2
    # The longest a host's invite link may stay open (--invite-max-hours). A link admits devices
    # without the host's click, so it should not outlive the event it was made for: a day
    # covers a workshop or a class; the page offers 15 min to 24 h and defaults to 1 h.
    invite_max_s: float = 24 * 3600.0


@dataclass(frozen=True)
class DataConfig:
    """Where ``/data`` reads its parquet text from (FineWeb-Edu by default, any Hub dataset
    with ``daisychain serve --dataset``: ``hubdataset.resolve``), and how hard it tries."""

    base_url: str = FINEWEB_BASE_URL
    repo: str = FINEWEB_REPO
    revision: str = FINEWEB_REVISION
    shards: tuple[str, ...] = FINEWEB_SHARDS
    # The shards' sizes in bytes when known (a resolved Hub dataset's listing), else empty: the
    # library reader needs them for a footer's tail read (the hand-written one learns the size
    # from its first answer's Content-Range).
    sizes: tuple[int, ...] = ()
    # The Hub split the shards are ("" : FineWeb-Edu's sample/10BT, named "fineweb@REV") and
    # the column the text is read from: together with repo and revision, the run's data name.
    split: str = ""
    text_column: str = "text"
    # Range reads through the hand-written aiohttp reader ("http") or huggingface_hub's file
    # system ("hub"); docs/BENCHMARKS.md "data" compares the two. "file": the server's own text
    # (--text DIR), prepared into local_dir (localtext.py) and named local:LABEL@DIGEST, where
    # the revision is DIGEST.
    reader: Literal["http", "hub", "file"] = "http"
    local_dir: str = ""
    local_label: str = ""
    # A Hub access token for private or gated datasets (--hf-token-file, HF_TOKEN): sent to
    # the Hub only, never in /api/status or to a page.
    token: str | None = field(default=None, repr=False)
    # --offline: never contact the upstream, always serve the built-in corpus.
    offline: bool = False
    # Per upstream request (a row group is ~3 MB): short, so a dead link falls back quickly.
    timeout_s: float = 10.0
    # After a failure the upstream is not tried again for retry_initial_s, doubling up to
    # retry_max_s while it keeps failing.
    retry_initial_s: float = 30.0
    retry_max_s: float = 600.0
    # First read of a shard fetches this many bytes from its end; FineWeb-Edu footers are larger,
    # so a cold shard costs two range GETs, a warm row group exactly one.
    footer_probe_bytes: int = 64 * 1024
    # Upstream reads in flight at once (Hugging Face rate-limits anonymous clients per address).
    max_concurrent_reads: int = 4
    # A signed CDN URL from the resolver is valid for about an hour; reuse it for less than that
    # so a warm read skips the resolver's redirect.
    redirect_ttl_s: float = 45 * 60.0
    # /data requests per client address: enough for a device fetching a batch every few
    # seconds, not enough for one client to spend the server's upstream quota.
    requests_per_s: float = 2.0
    burst: int = 20
    # Threads tokenizing for /data at once (0: one less than the CPUs, at least one). The
    # tokenizer releases the interpreter lock, but a thread per request on every core would
    # still starve the event loop's thread of CPU; the rest of the requests queue.
    tokenize_threads: int = 0
    # format=tokens requests sampling and tokenizing at once (0: tokenize_threads + 1, so one
    # samples while the others encode). Later ones wait before sampling, holding no text: each
    # holds ~1 MB of text, and twenty holding theirs at once left the server 56 MB larger after
    # they were freed.
    token_requests_at_once: int = 0
    # Addressed windows (/data?split=...) per client network: a training peer asks one per
    # step, a few steps ahead, and every device of a classroom behind one NAT shares the
    # budget. A window is small (8 characters per token: ~8 KB for the small preset) and
    # costs an upstream read only once per rank and 32 steps (fineweb.STEPS_PER_ROW_GROUP);
    # upstream reads stay bounded by max_concurrent_reads whoever asks.
    window_requests_per_s: float = 20.0
    window_burst: int = 100
    # /data requests of every form served at once, from sampling to the body's last byte handed
    # to the socket (an upstream read, the decode, the JSON and the write of ~1 MB each). The
    # rest wait in line, at most requests_waiting of them; one more is refused at once (503,
    # Retry-After, a hint) rather than queued. Fifty 1 MB requests from fifty addresses at once
    # kept the event loop busy with their JSON and writes, all ready together: /healthz waited
    # up to 364 ms (docs/BENCHMARKS.md, data). Four matches max_concurrent_reads.
    requests_at_once: int = 4
    requests_waiting: int = 128
    # Worker processes decoding parquet and building JSON bodies for /data (dataworker.py).
    # Both hold an interpreter lock most of the time: on a thread of the server, the event
    # loop waited for that lock on every select, recv and send (a /healthz probe up to 45 ms
    # under a burst); in a process of its own the work holds its own. One: the loop needs the
    # other core of a small machine, and the jobs are short (at most requests_at_once queued).
    work_processes: int = 1
    # The workers' niceness (os.nice): below the server's, so the loop wins a contended CPU.
    work_nice: int = 10

    def shard_url(self, shard: str) -> str:
        return f"{self.base_url.rstrip('/')}/datasets/{self.repo}/resolve/{self.revision}/{shard}"

    @property
    def name(self) -> str:
        """The ``config.data`` name of this text (``daisychain.datanames``)."""
        if self.local_label:
            return datanames.local(self.local_label, self.revision)
        if not self.split:
            return datanames.fineweb(self.revision)
        return datanames.hub(self.repo, self.revision, self.split, self.text_column)

    @property
    def source(self) -> Literal["fineweb", "dataset"]:
        """The ``source`` field of the answers this text makes."""
        return "fineweb" if not (self.split or self.local_label) else "dataset"

    @property
    def label(self) -> str:
        """The text's upstream, for people: "FineWeb-Edu", the dataset's repository, or the
        server's own text files."""
        if self.local_label:
            return f"text files {self.local_label!r}"
        return "FineWeb-Edu" if not self.split else self.repo


@dataclass(frozen=True)
class HttpLimits:
    """Deadlines for HTTP connections (``httpconn.py``); WebSockets, once upgraded, have their
    own heartbeat (``SignalingLimits.heartbeat_s``) and are not subject to these."""

    # From accepting a connection to a complete first request head. A head is at most ~16 KB
    # (aiohttp's line and field limits); a browser on a slow mobile link sends one in well under
    # a second, so 15 s only ever cuts off silent connections and slowloris clients, which
    # otherwise hold a socket and a handler for as long as they trickle.
    head_timeout_s: float = 15.0
    # An idle keep-alive connection is closed this long after its last response, and so is one
    # whose next request head is not complete by then. Longer than the 60 s a reverse proxy
    # (nginx's default) keeps an idle upstream connection, so a proxy never races our close.
    keepalive_timeout_s: float = 75.0
    # Open connections per client network (an IPv4 address, an IPv6 /64) when the server faces
    # clients directly (not with --trust-proxy). A classroom of 40 devices behind one NAT, each
    # browser holding up to 6 connections and a WebSocket, needs ~280; more from one address is
    # a flood of sockets, each a file descriptor and ~5 KB held until the head deadline.
    max_connections_per_address: int = 512


@dataclass(frozen=True)
class ServerConfig:
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    # Honour X-Forwarded-For / Forwarded only behind a reverse proxy we control (a Space).
    trust_proxy: bool = False
    # Write client addresses in full in the logs (--log-full-addresses); by default a line
    # names the client's network only (an IPv4 /24, an IPv6 /48): docs/SERVER.md, "What the
    # server keeps".
    log_full_addresses: bool = False
    signaling: SignalingLimits = field(default_factory=SignalingLimits)
    data: DataConfig = field(default_factory=DataConfig)
    http: HttpLimits = field(default_factory=HttpLimits)
    ice: IceConfig = field(default_factory=IceConfig)
    # Asset folders; None -> daisychain.assets.asset_dir(name). Tests point these at tmp dirs.
    static_dir: Path | None = None
    kernels_dir: Path | None = None
    luts_dir: Path | None = None
