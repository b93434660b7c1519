"""What a client proves and checks when it connects: credentials for HELLO, TLS settings.

A hub with a users file wants HELLO's token to be ``USER:SECRET`` (a password or a token made
by ``pub0sub auth``); :func:`hello_token` builds it from ``user``/``password`` or takes a whole
``token``.  A hub with ``--tls-cert`` speaks TLS only: :func:`tls_context` makes the settings
the SDK connects with, and **always verifies the hub's certificate and name** unless given an
``ssl.SSLContext`` that says otherwise.  ``ca_file`` names the CA to trust (default: the
system's), ``cert_file``/``key_file`` the client's own certificate for a hub that asks for one.
"""

from __future__ import annotations

import os
import ssl

from wire.credentials import join_credentials

from .errors import TlsError

PathLike = str | os.PathLike[str]


def hello_token(*, token: bytes | str = b"", user: str | None = None, password: str | None = None) -> bytes:
    """HELLO's token: ``token`` as given, or ``USER:PASSWORD`` in UTF-8 (docs/security.md).

    >>> hello_token(user="alice", password="s3cret")
    b'alice:s3cret'
    """
    if user is None and password is None:
        return token.encode("utf-8") if isinstance(token, str) else token
    if token:
        raise ValueError("give either token or user and password, not both")
    if user is None or password is None:
        raise ValueError("user and password go together")
    return join_credentials(user, password)


def tls_context(
    tls: bool | ssl.SSLContext | None = None,
    *,
    ca_file: PathLike | None = None,
    cert_file: PathLike | None = None,
    key_file: PathLike | None = None,
) -> ssl.SSLContext | None:
    """The TLS settings to connect with, or None for plain TCP.

    TLS is on when ``tls`` is true or a context, or when any file is given.  The context made
    here verifies the hub's certificate against ``ca_file`` (else the system's CAs) and its
    name against the address dialled, and speaks TLS 1.2 or newer.
    """
    if isinstance(tls, ssl.SSLContext):
        if ca_file or cert_file or key_file:
            raise ValueError("give either an ssl.SSLContext or the files to build one, not both")
        return tls
    if not tls and ca_file is None and cert_file is None and key_file is None:
        return None
    if tls is False:
        raise ValueError("tls=False with a CA or certificate file: the files need TLS")
    if key_file is not None and cert_file is None:
        raise ValueError("key_file needs cert_file")
    context = ssl.create_default_context(cafile=os.fspath(ca_file) if ca_file is not None else None)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if cert_file is not None:
        context.load_cert_chain(cert_file, key_file)
    return context


def tls_failure(address: str, exc: BaseException) -> TlsError:
    """The one-line error for a failed handshake, with the likely cause."""
    reason = getattr(exc, "reason", None) or str(exc)
    if isinstance(exc, ssl.SSLCertVerificationError):
        reason = f"certificate verify failed: {exc.verify_message}"
        hint = "the hub's certificate is not trusted: pass the CA that signed it (ca_file, --ca-file)"
    else:
        hint = "does the hub speak TLS (--tls-cert)? or does it want a client certificate (cert_file, --cert)?"
    return TlsError(f"TLS handshake with {address} failed: {reason}; {hint}")
