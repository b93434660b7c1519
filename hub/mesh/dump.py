"""``--mesh-dump DIR``: every mesh stream's decrypted bytes, one file per direction, for ``pub0sub decode``.

Mesh links run inside Noise, so a packet capture of a mesh port shows only ciphertext.  A hub
started with ``--mesh-dump DIR`` writes, for each mesh session, the plaintext it sends and the
plaintext it receives to two files in ``DIR``::

    <UTC start>-<n>-<peer id's last 8 chars>-sent.mesh       what this hub wrote on the stream
    <UTC start>-<n>-<peer id's last 8 chars>-received.mesh   what it read from the stream

Each file is that direction of the stream from its first byte (MESH_HELLO on v2): the mesh's
frames back to back, the framing ``pub0sub decode FILE`` reads.  A session cut off in the
middle of a frame leaves a truncated last frame, which ``decode`` reports as such.

The bytes are taken where the session already holds them -- the chunk the writer hands to
libp2p, the bytes the reader feeds its frame decoder -- by wrapping the session's reader and
writer (:func:`tap`).  A hub without ``--mesh-dump`` never builds the wrappers, so the mesh
paths run exactly as without this module.  With it, each mesh read and write costs one
``write(2)`` to a local file (unbuffered: a hub killed mid-session loses nothing of the dump).
For debugging, not for production: the files hold every forwarded message's payload, so they
are created readable by the hub's user only.
"""

from __future__ import annotations

import itertools
import logging
import os
import time
from pathlib import Path
from typing import Protocol

from ..core.events import ev

log = logging.getLogger("hub.mesh.dump")

#: File names of one session's two directions end with these.
SENT_SUFFIX = "-sent.mesh"
RECEIVED_SUFFIX = "-received.mesh"

_sessions = itertools.count(1)


class StreamReader(Protocol):
    async def read(self, max_bytes: int) -> tuple[bytes, bool]: ...


class StreamWriter(Protocol):
    async def write(self, data: bytes) -> bool: ...


class StreamDump:
    """The two files of one mesh session; :meth:`close` when the session has ended."""

    def __init__(self, directory: Path, peer_short_id: str) -> None:
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        stem = directory / f"{stamp}-{next(_sessions):04d}-{peer_short_id}"
        self.sent_path = stem.with_name(stem.name + SENT_SUFFIX)
        self.received_path = stem.with_name(stem.name + RECEIVED_SUFFIX)
        self._sent = _create(self.sent_path)
        try:
            self._received = _create(self.received_path)
        except OSError:
            os.close(self._sent)
            raise
        self._open = True

    def tap(self, reader: StreamReader, writer: StreamWriter) -> tuple[StreamReader, StreamWriter]:
        """``reader`` and ``writer`` with every byte they move also written to this dump."""
        return _DumpingReader(reader, self._received), _DumpingWriter(writer, self._sent)

    def close(self) -> None:
        """Close both files (once: a descriptor number closed twice may be another file's by then)."""
        if self._open:
            self._open = False
            os.close(self._sent)
            os.close(self._received)


def open_dump(directory: Path, peer_key: str, peer_short_id: str) -> StreamDump | None:
    """A dump for a new session with ``peer_key``; None (logged, the session runs undumped) if
    its files cannot be created: a debugging aid must not cost the link."""
    try:
        dump = StreamDump(directory, peer_short_id)
    except OSError as exc:
        log.warning("cannot dump the mesh stream with %s to %s: %s", peer_key, directory, exc,
                    extra=ev("mesh_dump_failed", peer=peer_key, reason=str(exc)))  # fmt: skip
        return None
    log.info("mesh stream with %s dumped to %s and %s", peer_key, dump.sent_path.name, dump.received_path.name,
             extra=ev("mesh_dump", peer=peer_key, x_sent=str(dump.sent_path), x_received=str(dump.received_path)))
    return dump


def _create(path: Path) -> int:
    # O_EXCL: a name is never reused (the session counter and the start time make it unique
    # in one process; two hubs must not share a directory).  0o600: payloads inside.
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class _DumpingReader:
    def __init__(self, inner: StreamReader, fd: int) -> None:
        self._inner = inner
        self._fd = fd

    async def read(self, max_bytes: int) -> tuple[bytes, bool]:
        data, fast = await self._inner.read(max_bytes)
        if data:
            _write_all(self._fd, data)
        return data, fast


class _DumpingWriter:
    def __init__(self, inner: StreamWriter, fd: int) -> None:
        self._inner = inner
        self._fd = fd

    async def write(self, data: bytes) -> bool:
        # Written down first: what the writer was asked to send, even if the send then fails.
        _write_all(self._fd, data)
        return await self._inner.write(data)
