"""Users files and certificates for tests of authentication, ACLs and TLS.

Secrets are hashed with argon2id at a tiny cost (the hub reads the cost from each hash), so a
test authenticates in a millisecond; certificates come from ``trustme``, a library made for
test CAs, never from hand-written OpenSSL calls.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import argon2
import pytest
import trustme

_CHEAP = argon2.PasswordHasher(time_cost=1, memory_cost=1024, parallelism=1)


@functools.cache
def cheap_hash(secret: str) -> str:
    """One hash per secret for the whole run: a users file rewritten with the same secret keeps
    its hash, as an operator's edit of the grants would (a new hash revokes the old one's sessions)."""
    return _CHEAP.hash(secret)


def user_entry(name: str, secret: str, **rights: object) -> str:
    """A ``[users.NAME]`` table: ``publish=["a.>"]`` or ``subscribe={"allow": [...], "deny": [...]}``."""
    lines = [f'[users."{name}"]', f'secrets = ["{cheap_hash(secret)}"]']
    lines += [f"{key} = {toml_value(value)}" for key, value in rights.items()]
    return "\n".join(lines) + "\n"


def toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + " }"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(f'"{v}"' for v in value) + "]"
    raise TypeError(value)


def write_users(path: Path, *entries: str) -> Path:
    path.write_text("\n".join(entries))
    return path


@dataclass
class Certs:
    """A test CA, the hub's certificate for 127.0.0.1/localhost, and a client certificate, as files."""

    ca: Path
    hub_cert: Path
    hub_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path  # a CA that signed none of these


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Certs]:
    root = tmp_path_factory.mktemp("certs")
    ca, other = trustme.CA(), trustme.CA()
    hub = ca.issue_cert("127.0.0.1", "localhost")
    client = ca.issue_cert("client@example.org")
    files = Certs(root / "ca.pem", root / "hub.pem", root / "hub.key", root / "client.pem", root / "client.key",
                  root / "other-ca.pem")  # fmt: skip
    ca.cert_pem.write_to_path(str(files.ca))
    other.cert_pem.write_to_path(str(files.other_ca))
    hub.private_key_pem.write_to_path(str(files.hub_key))
    client.private_key_pem.write_to_path(str(files.client_key))
    with files.hub_cert.open("wb") as out:
        for blob in hub.cert_chain_pems:
            out.write(blob.bytes())
    with files.client_cert.open("wb") as out:
        for blob in client.cert_chain_pems:
            out.write(blob.bytes())
    yield files
