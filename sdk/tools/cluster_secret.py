"""The cluster secret hubs prove to each other in the mesh handshake (``--cluster-secret-file``).

``pub0sub cluster up`` and the demo make one in their data root and give it to every hub they
start, so a stranger's libp2p key reaching a mesh port links to nothing (docs/security.md,
"Mesh admission").  The file holds 64 random hex digits (256 bits), readable by its owner
alone; it is kept across restarts, so restarted hubs still belong to the same cluster.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

SECRET_FILE = "cluster.secret"
#: 32 random bytes, as hex: as strong as the HMAC-SHA256 that proves it.
SECRET_BYTES = 32


def make_secret_file(path: Path) -> Path:
    """Write a new random secret to ``path`` (mode 0600); refuses to replace an existing file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # O_EXCL: never overwrite a secret hubs are using; 0600 from the start, no readable window.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(SECRET_BYTES) + "\n")
    return path


def cluster_secret(data_root: Path) -> Path:
    """The secret file of the cluster in ``data_root``, made there first if missing."""
    path = data_root / SECRET_FILE
    if not path.exists():
        make_secret_file(path)
    return path
