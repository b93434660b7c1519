"""A throwaway certificate authority for hubs on loopback (``pub0sub cluster up --tls``, the demo).

``trustme`` makes a CA and one certificate for ``127.0.0.1``/``localhost`` in ``DIR``: the hubs
serve it, clients verify it with ``--ca-file DIR/ca.pem``.  Kept across restarts (the same CA
stays valid for clients already pointed at it); good for trying TLS out on one machine, never
for a real deployment, whose certificates come from its own CA (docs/security.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trustme


@dataclass(frozen=True)
class LocalTls:
    ca: Path
    cert: Path
    key: Path

    def hub_args(self) -> list[str]:
        return ["--tls-cert", str(self.cert), "--tls-key", str(self.key)]

    def client_options(self) -> dict[str, Any]:
        return {"ca_file": str(self.ca)}


def local_tls(directory: Path) -> LocalTls:
    """The CA and hub certificate in ``directory``, made there first if missing."""
    files = LocalTls(directory / "ca.pem", directory / "hub.pem", directory / "hub.key")
    if files.ca.exists() and files.cert.exists() and files.key.exists():
        return files
    directory.mkdir(parents=True, exist_ok=True)
    ca = trustme.CA(organization_name="pub0sub local test CA")
    issued = ca.issue_cert("127.0.0.1", "localhost")
    issued.private_key_pem.write_to_path(str(files.key))
    files.key.chmod(0o600)
    files.cert.write_bytes(b"".join(blob.bytes() for blob in issued.cert_chain_pems))
    ca.cert_pem.write_to_path(str(files.ca))
    return files
