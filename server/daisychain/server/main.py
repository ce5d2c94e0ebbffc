"""``python -m daisychain.server`` / ``daisychain serve``: run the server until SIGINT/SIGTERM.

On a signal the server stops accepting connections, tells every WebSocket client it is going
away (close 1001), closes the upstream client session and exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import logging
import math
import os
import signal
import sys
from dataclasses import replace
from pathlib import Path

from daisychain.server import banner, logs, tls
from daisychain.server.app import ACCESS, DATA, Listener, create_app, listen, make_runner
from daisychain.server.config import (
    DEFAULT_HOST,
    DEFAULT_PORT,
    FINEWEB_BASE_URL,
    FINEWEB_REVISION,
    DataConfig,
    HttpLimits,
    ServerConfig,
    SignalingLimits,
)
from daisychain.wire import ice
from daisychain.wire.ice import IceConfig

log = logging.getLogger("daisychain.server")


def _default_port() -> int:
    raw = os.environ.get("PORT")
    if raw is None:
        return DEFAULT_PORT
    try:
        return int(raw)
    except ValueError:
        raise SystemExit(f"PORT={raw!r} is not a port number; unset it or use --port") from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--host", default=DEFAULT_HOST, help="address to listen on (0.0.0.0 serves your LAN)"
    )
    parser.add_argument(
        "--port", type=int, default=None,
        help=f"port to listen on (default: $PORT, else {DEFAULT_PORT}; 0 picks a free one)",
    )  # fmt: skip
    tls_group = parser.add_argument_group(
        "https (what phones and other LAN devices need: over plain http their browsers withhold "
        "WebGPU, Web Crypto and saves)"
    )
    tls_group.add_argument(
        "--https", action="store_true",
        help="serve https and wss with a self-signed certificate made once for this machine "
        "and kept in --state-dir (each device accepts it once)",
    )  # fmt: skip
    tls_group.add_argument(
        "--cert", type=Path, metavar="FILE",
        help="serve https with this PEM certificate (a full chain may follow the leaf), e.g. "
        "from `tailscale cert` or any CA; needs --key",
    )  # fmt: skip
    tls_group.add_argument("--key", type=Path, metavar="FILE", help="the PEM key of --cert")
    tls_group.add_argument(
        "--state-dir", type=Path, metavar="DIR", default=None,
        help="where the made certificate is kept (default: $DAISYCHAIN_STATE_DIR, else "
        "$XDG_STATE_HOME/daisychain, else ~/.local/state/daisychain)",
    )  # fmt: skip
    tls_group.add_argument(
        "--http-port", type=int, metavar="PORT",
        help="with https, also serve plain http on PORT: devices that cannot accept the "
        "certificate train there on their CPU, and the page points them to https",
    )  # fmt: skip
    parser.add_argument(
        "--trust-proxy", action="store_true",
        help="group clients by X-Forwarded-For/Forwarded (only behind your own reverse proxy)",
    )  # fmt: skip
    parser.add_argument(
        "--head-timeout", type=float, default=HttpLimits.head_timeout_s,
        help="seconds from accepting a connection to a complete request head before it is closed",
    )  # fmt: skip
    data = parser.add_argument_group("data source (/data)")
    data.add_argument(
        "--data-url", default=FINEWEB_BASE_URL,
        help="base URL serving /datasets/<repo>/resolve/<revision>/<path> with range requests",
    )  # fmt: skip
    data.add_argument(
        "--data-revision", default=FINEWEB_REVISION, help="dataset commit to read (pinned)"
    )
    data.add_argument(
        "--offline", action="store_true", help="never contact the upstream; serve built-in text"
    )
    data.add_argument(
        "--data-timeout", type=float, default=DataConfig.timeout_s,
        help="seconds per upstream request before falling back to the built-in corpus",
    )  # fmt: skip
    data.add_argument(
        "--dataset", metavar="REPO[@REVISION]",
        help="train on this Hugging Face parquet dataset instead of FineWeb-Edu, pinned at start "
        "to the commit REVISION names (default: its main branch)",
    )  # fmt: skip
    data.add_argument(
        "--text", metavar="DIR", type=Path,
        help="train on the .txt, .md, .jsonl and .parquet files in DIR instead of FineWeb-Edu "
        "(prepared once into --state-dir; named by their content's digest)",
    )  # fmt: skip
    data.add_argument(
        "--split", default="train",
        help="with --dataset: the split to read (default %(default)s)",
    )  # fmt: skip
    data.add_argument(
        "--text-column", default=DataConfig.text_column, metavar="NAME",
        help="with --dataset, or --text's .jsonl and .parquet files: the column holding the text "
        "(default %(default)s)",
    )  # fmt: skip
    data.add_argument(
        "--data-reader", choices=("http", "hub"), default=DataConfig.reader,
        help="range reads by DaisyChain's own HTTP reader or huggingface_hub's file system "
        "(default %(default)s: docs/BENCHMARKS.md, data)",
    )  # fmt: skip
    data.add_argument(
        "--hf-token-file", metavar="PATH",
        help="a Hugging Face token for a private or gated --dataset (default: $HF_TOKEN); sent "
        "to the Hub only, never to pages",
    )  # fmt: skip
    rooms = parser.add_argument_group("rooms")
    rooms.add_argument(
        "--join-timeout", type=float, default=SignalingLimits.join_timeout_s,
        help="seconds a join request waits for the host",
    )  # fmt: skip
    rooms.add_argument(
        "--invite-max-hours", type=float, default=SignalingLimits.invite_max_s / 3600,
        help="the longest a host's invite link may stay open (default %(default)g h)",
    )  # fmt: skip
    ice_group = parser.add_argument_group(
        "ICE servers (handed to every page and peer in welcome; default none: direct routes only)"
    )
    ice_group.add_argument(
        "--ice-server", action="append", default=[], metavar="URL",
        help="STUN or TURN server, repeatable: stun:HOST[:PORT], turn:HOST[:PORT]"
        "[?transport=udp|tcp], turns:HOST[:PORT]",
    )  # fmt: skip
    ice_group.add_argument("--ice-username", help="TURN username, the same for every client")
    ice_group.add_argument("--ice-credential", help="TURN password for --ice-username")
    ice_group.add_argument(
        "--ice-secret",
        help="secret shared with the TURN server (coturn --static-auth-secret): every client "
        "gets its own time-limited credential",
    )
    ice_group.add_argument(
        "--ice-secret-file", metavar="PATH",
        help="read --ice-secret from this file (keeps it out of the process list)",
    )  # fmt: skip
    ice_group.add_argument(
        "--ice-ttl", type=int, default=IceConfig.ttl_s, metavar="SECONDS",
        help="lifetime of credentials minted from the secret (default %(default)s)",
    )  # fmt: skip
    ice_group.add_argument(
        "--ice-relay-only", action="store_true",
        help="tell clients to use TURN relay candidates only (hides device addresses)",
    )  # fmt: skip
    logging_group = parser.add_argument_group("logging")
    logging_group.add_argument(
        "--log-level", default="info", choices=("debug", "info", "warning", "error")
    )
    logging_group.add_argument(
        "--log-format", default="kv", choices=("kv", "json"), help="one line per record"
    )
    logging_group.add_argument(
        "--log-full-addresses",
        action="store_true",
        help="write client addresses in full (default: the client's network only, an IPv4 /24 "
        "or an IPv6 /48); room codes are never written, only a keyed tag",
    )


def config_from_args(args: argparse.Namespace) -> ServerConfig:
    port = args.port if args.port is not None else _default_port()
    if not 0 <= port <= 65535:
        raise SystemExit(f"--port {port} is out of range 0-65535")
    if not (math.isfinite(args.head_timeout) and args.head_timeout > 0):
        raise SystemExit(f"--head-timeout {args.head_timeout} must be a positive number of seconds")
    if not 0 < args.invite_max_hours <= 366 * 24:
        raise SystemExit(
            f"--invite-max-hours {args.invite_max_hours:g} must be more than 0 and at most 8784 "
            "(366 days)"
        )
    return ServerConfig(
        ice=ice_config_from_args(args),
        host=args.host,
        port=port,
        trust_proxy=args.trust_proxy,
        log_full_addresses=args.log_full_addresses,
        http=replace(HttpLimits(), head_timeout_s=args.head_timeout),
        signaling=replace(
            SignalingLimits(),
            join_timeout_s=args.join_timeout,
            invite_max_s=args.invite_max_hours * 3600,
        ),
        data=replace(
            DataConfig(),
            base_url=args.data_url,
            revision=args.data_revision,
            offline=args.offline,
            timeout_s=args.data_timeout,
            reader=args.data_reader,
        ),
    )


def dataset_from_args(args: argparse.Namespace, data: DataConfig) -> DataConfig:
    """``data`` reading ``--dataset`` at its pinned commit (asks the Hub: blocking), or
    ``--text``'s files, or ``data`` itself; text that cannot be served stops the server here
    with a hint."""
    from daisychain.server import hubdataset

    if args.text is not None:
        return _local_text(args, data)
    if args.dataset is None:
        if args.hf_token_file is not None:
            raise SystemExit("--hf-token-file is for --dataset\nhint: add --dataset REPO")
        return data
    if args.offline:
        raise SystemExit(
            "--dataset needs the Hub at start (to pin its commit and list its files)\n"
            "hint: drop --offline, or drop --dataset to serve the built-in corpus"
        )
    token = os.environ.get("HF_TOKEN") or None
    if args.hf_token_file is not None:
        try:
            token = Path(args.hf_token_file).read_text(encoding="utf-8").strip() or None
        except (OSError, UnicodeDecodeError) as exc:
            raise SystemExit(
                f"cannot read --hf-token-file {args.hf_token_file}: {exc}\n"
                "hint: give a file holding a token from huggingface.co/settings/tokens"
            ) from None
    try:
        spec = hubdataset.parse_spec(args.dataset, args.split, args.text_column)
        resolved = hubdataset.resolve(spec, replace(data, token=token))
    except hubdataset.DatasetError as exc:
        raise SystemExit(f"{exc.message}\nhint: {exc.hint}") from None
    log.info(
        "training text: %s (%d parquet files)", resolved.name, len(resolved.shards),
        extra={"fields": {"data": resolved.name, "files": len(resolved.shards)}},
    )  # fmt: skip
    return resolved


def _local_text(args: argparse.Namespace, data: DataConfig) -> DataConfig:
    from daisychain.server import localtext

    if args.dataset is not None or args.offline:
        raise SystemExit(
            f"--text serves your files; {'--dataset' if args.dataset else '--offline'} serves "
            f"{'a Hub dataset' if args.dataset else 'the built-in corpus'}\n"
            "hint: give one of --text, --dataset and --offline"
        )
    state = args.state_dir if args.state_dir is not None else tls.default_state_dir()
    try:
        prepared = localtext.prepare(args.text, state, args.text_column)
    except localtext.TextError as exc:
        raise SystemExit(f"{exc.message}\nhint: {exc.hint}") from None
    except OSError as exc:
        raise SystemExit(
            f"cannot prepare --text {args.text} under {state}: {exc}\n"
            "hint: give a readable folder, and a writable --state-dir"
        ) from None
    log.info(
        "training text: %s (%d documents from %d files; %d other files skipped)",
        prepared.name, prepared.documents, prepared.files, prepared.skipped,
        extra={"fields": {"data": prepared.name, "documents": prepared.documents}},
    )  # fmt: skip
    return localtext.config_for(prepared, data)


def certificate_from_args(args: argparse.Namespace, host: str) -> tls.Certificate | None:
    """The certificate to serve, or None for plain http; a setting that cannot work stops the
    server here with a hint."""
    if (args.cert is None) != (args.key is None):
        raise SystemExit(
            f"{'--cert' if args.cert is not None else '--key'} given alone\n"
            "hint: give both --cert FILE and --key FILE, or --https for a made certificate"
        )
    if args.http_port is not None and not (args.https or args.cert):
        raise SystemExit(
            "--http-port is a second, plain http port next to https\n"
            "hint: add --https (or --cert/--key), or drop --http-port"
        )
    if args.http_port is not None and not 0 <= args.http_port <= 65535:
        raise SystemExit(f"--http-port {args.http_port} is out of range 0-65535")
    try:
        if args.cert is not None:
            return tls.load_certificate(args.cert, args.key)
        if not args.https:
            return None
        state = args.state_dir if args.state_dir is not None else tls.default_state_dir()
        addresses = tls.interface_addresses() + tls.listen_addresses(host)
        certificate = tls.ensure_certificate(state, tls.local_names(), addresses)
        certificate.context()  # refuse now, not on the first connection
        return certificate
    except tls.TlsError as exc:
        raise SystemExit(f"{exc.message}\nhint: {exc.hint}") from None
    except OSError as exc:
        raise SystemExit(
            f"cannot keep a certificate in {state}: {exc.strerror or exc}\n"
            "hint: give a writable folder with --state-dir DIR"
        ) from None


def ice_config_from_args(args: argparse.Namespace) -> IceConfig:
    """The ICE flags as a checked ``IceConfig``; a setting that cannot work stops the server
    here, with a hint, rather than every client failing later (``ice.check``)."""
    secret = args.ice_secret
    if args.ice_secret_file is not None:
        if secret is not None:
            raise SystemExit("--ice-secret and --ice-secret-file both given\nhint: choose one")
        try:
            with open(args.ice_secret_file, encoding="utf-8") as f:
                secret = f.read().rstrip("\r\n")
        except (OSError, UnicodeDecodeError) as exc:
            raise SystemExit(
                f"cannot read --ice-secret-file {args.ice_secret_file}: {exc}\n"
                "hint: a UTF-8 text file holding the secret on one line"
            ) from None
    config = IceConfig(
        urls=tuple(args.ice_server),
        username=args.ice_username,
        credential=args.ice_credential,
        secret=secret,
        ttl_s=args.ice_ttl,
        relay_only=args.ice_relay_only,
    )
    try:
        ice.check(config)
    except ice.IceError as exc:
        raise SystemExit(f"{exc.message}\nhint: {exc.hint}") from None
    return config


def log_ice(config: IceConfig) -> None:
    """One line saying which ICE servers clients are given (never a credential or secret)."""
    if not config.urls:
        log.info("ICE servers: none (clients use direct routes only)")
        return
    auth = "minted from the secret" if config.secret else "static" if config.username else "none"
    log.info(
        "ICE servers: %s; TURN credentials %s; policy %s", " ".join(config.urls), auth,
        "relay" if config.relay_only else "all",
        extra={"fields": {"ice_servers": list(config.urls), "credentials": auth,
                          "relay_only": config.relay_only}},
    )  # fmt: skip


# glibc's mallopt(): M_MMAP_THRESHOLD is -3 in <malloc.h>.
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 128 * 1024


def give_freed_buffers_back() -> bool:
    """Serve every allocation of 128 KB or more from its own mapping, returned to the system
    when freed (glibc only; elsewhere a no-op that returns False).

    glibc starts there but raises the threshold to the largest block freed so far, so after a
    burst of ``/data`` requests (~1 MB of text each) such blocks come from the heap and stay with
    the process once freed: twenty max-token requests left it ~8 MB larger for good. Pinning
    the threshold keeps what a burst borrowed from staying (measured: +11 MB after a twenty-
    request flood instead of +17 to +21 MB; the rest is the tokenizer's own working set).
    """
    if sys.platform != "linux":
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        return bool(libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False


async def serve(
    config: ServerConfig,
    certificate: tls.Certificate | None = None,
    http_port: int | None = None,
) -> None:
    """Run until SIGINT or SIGTERM, then shut down cleanly. With ``certificate`` the port
    serves https (and ``http_port``, if given, plain http as well)."""
    give_freed_buffers_back()
    app = create_app(config)
    runner = make_runner(app, shutdown_timeout=5.0)
    await runner.setup()
    await app[DATA].preload()  # before listening: no request waits for a load
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        listeners = [Listener(config.host, config.port, certificate)]
        if certificate is not None and http_port is not None:
            listeners.append(Listener(config.host, http_port))
        urls = await listen(runner, config, listeners)
        for url in urls:
            log.info("listening on %s", url, extra={"fields": {"url": url}})
        log_ice(config.ice)
        unicode = (sys.stdout.encoding or "").lower().replace("-", "") == "utf8"
        shown = banner.text(urls, app[ACCESS].lan_urls, certificate, unicode=unicode)
        if shown:
            print(shown, flush=True)
        await stop.wait()
        log.info("shutting down")
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
        await runner.cleanup()


def run(args: argparse.Namespace) -> int:
    logs.configure(args.log_level, args.log_format)
    config = config_from_args(args)
    config = replace(config, data=dataset_from_args(args, config.data))
    certificate = certificate_from_args(args, config.host)
    try:
        asyncio.run(serve(config, certificate, args.http_port))
    except OSError as exc:
        log.error("cannot listen on %s:%d: %s", config.host, config.port, exc)
        print(f"hint: another process may use port {config.port}; try --port 0 or another port")
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m daisychain.server", description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))
