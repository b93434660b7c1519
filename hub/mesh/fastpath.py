"""The one gate of the libp2p fast paths: checked once, forced off by a flag, loud when not taken.

The mesh's fast reader (``fastread.py``), fast writer (``fastwrite.py``) and yamux
demultiplexer (``demux.py``) reach into py-libp2p's Noise/yamux/TCP stack
through names that are not its public API.  They were written against one
version (:data:`TESTED_LIBP2P_VERSION`, pinned in pyproject.toml); another
version may rename or repurpose any of those names.  So before a stream uses
them, this module checks -- once per process, on the first real stream -- that
the installed libp2p is that version and that every name in
:data:`PRIVATE_NAMES` is where the fast paths expect it.  If anything differs,
every stream takes libp2p's own read and write path (correct, slower), and the
hub says so at WARNING with the reason.  ``--mesh-plain-io`` (or
``PUB0SUB_MESH_PLAIN_IO=1``) forces the plain path too, e.g. to rule the fast
paths out when chasing a problem.  ``tests/test_mesh_fastpath_contract.py``
checks every listed name against real libp2p objects.
"""

from __future__ import annotations

import importlib.metadata
import logging
import os
from typing import Any

log = logging.getLogger("hub.mesh")

#: The py-libp2p release the fast paths were written and measured against.
TESTED_LIBP2P_VERSION = "0.8.1"
#: Set to 1 to force libp2p's own read/write path on every mesh stream.
PLAIN_IO_ENV = "PUB0SUB_MESH_PLAIN_IO"

#: Every name of py-libp2p the fast paths use beyond its public stream API, by the class of the
#: object they use it on (instance attributes included: they are checked on live objects).
PRIVATE_NAMES: dict[str, tuple[str, ...]] = {
    # libp2p.stream_muxer.yamux.yamux.YamuxStream
    "YamuxStream": (
        "stream_id", "send_window", "recv_window", "target_recv_window", "_grow_threshold",
        "_auto_tune_and_send_window_update", "closed", "send_closed", "recv_closed", "reset_received", "rw_lock",
    ),
    # libp2p.stream_muxer.yamux.yamux.Yamux
    "Yamux": ("streams", "stream_buffers", "stream_events", "event_shutting_down", "_write_lock", "secured_conn"),
    # libp2p.security.secure_session.SecureSession
    "SecureSession": ("conn", "read", "low_watermark", "high_watermark", "_drain"),
    # libp2p.security.noise.io.NoiseTransportReadWriter
    "NoiseTransportReadWriter": ("read_writer", "encrypt", "read_msg"),
    # libp2p.security.noise.io.NoisePacketReadWriter
    "NoisePacketReadWriter": ("read_write_closer",),
    # libp2p.network.connection.raw_connection.RawConnection
    "RawConnection": ("stream",),
    # libp2p.io.trio.TrioTCPStream
    "TrioTCPStream": ("stream", "read_lock", "write_lock", "_cached_remote_address"),
    # the YamuxStream's rw_lock (libp2p.stream_muxer.rw_lock.ReadWriteLock)
    "ReadWriteLock": ("_writer_lock",),
}  # fmt: skip


def installed_libp2p_version() -> str:
    try:
        return importlib.metadata.version("libp2p")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def stack_of(stream: Any) -> dict[str, Any] | None:
    """The libp2p objects under ``stream`` the fast paths use, by class name (None: not that stack)."""
    try:
        ys = stream.muxed_stream
        yamux = ys.conn
        session = yamux.secured_conn
        noise = session.conn
        packets = noise.read_writer
        raw = packets.read_write_closer
        tcp = raw.stream
        lock = ys.rw_lock
    except AttributeError:
        return None
    objects = {
        "YamuxStream": ys, "Yamux": yamux, "SecureSession": session, "NoiseTransportReadWriter": noise,
        "NoisePacketReadWriter": packets, "RawConnection": raw, "TrioTCPStream": tcp, "ReadWriteLock": lock,
    }  # fmt: skip
    # A subclass (the fast reader's BufferedTCPStream) counts as its base class.
    if any(name not in {c.__name__ for c in type(obj).__mro__} for name, obj in objects.items()):
        return None
    return objects


def missing_names(objects: dict[str, Any]) -> list[str]:
    """``Class.name`` for every :data:`PRIVATE_NAMES` entry not found on the live ``objects``."""
    return [f"{cls}.{name}" for cls, names in PRIVATE_NAMES.items() for name in names
            if not hasattr(objects[cls], name)]  # fmt: skip


class FastPathGate:
    """Decides, per mesh stream, whether the fast paths may be used (see the module docstring)."""

    def __init__(self) -> None:
        #: None until the first stream was checked; then the reason they are off for good ("" = on).
        self._verdict: str | None = None

    def reason_not_to(self, stream: Any, *, plain_io: bool = False) -> str | None:
        """Why ``stream`` must use libp2p's plain path, or None if the fast paths may be used."""
        if plain_io or os.environ.get(PLAIN_IO_ENV) == "1":
            return f"plain I/O was asked for (--mesh-plain-io or {PLAIN_IO_ENV}=1)"
        objects = stack_of(stream)
        if objects is None:
            return "the stream is not libp2p's Noise over yamux over TCP"
        if self._verdict is None:
            self._verdict = self._check_once(objects)
        return self._verdict or None

    @staticmethod
    def _check_once(objects: dict[str, Any]) -> str:
        version = installed_libp2p_version()
        if version != TESTED_LIBP2P_VERSION:
            return f"libp2p {version} is installed; the fast paths were written for {TESTED_LIBP2P_VERSION}"
        missing = missing_names(objects)
        if missing:
            return f"libp2p {version} lacks names the fast paths use: {', '.join(missing)}"
        return ""


#: The process's gate: the check runs once, on the first stream.
GATE = FastPathGate()
