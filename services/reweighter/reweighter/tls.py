"""TLS on both transports, in the service itself: the server's certificate and key (settings
`tls_cert_file`, `tls_key_file`) and the roots a client trusts (`connect(..., ca_file=)`).

The server reads both files once at start and refuses to start, naming the setting, when one
is given without the other, is unreadable, or the pair does not load; HTTP (uvicorn's
`ssl_certfile`/`ssl_keyfile`, asyncio's TLS below the connection layer) and gRPC
(`grpc.ssl_server_credentials`) then serve the same pair on their own ports. A client trusts
`ca_file`, else the file named by `SSL_CERT_FILE`, else the system's roots: one rule for
`https://` (an ssl.SSLContext for aiohttp) and `grpcs://` (`grpc.ssl_channel_credentials`).
docs/service.md, "TLS".
"""

from __future__ import annotations

import os
import ssl
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .config import Settings


class TLSSettingsError(ValueError):
    """A TLS setting the service cannot start with; the message names the setting."""


@dataclass(frozen=True)
class ServerTLS:
    """The certificate chain and key the service serves on both ports."""

    cert_file: str
    key_file: str
    cert_pem: bytes = field(repr=False)
    key_pem: bytes = field(repr=False)

    def grpc_credentials(self) -> Any:  # grpc.ServerCredentials
        import grpc

        return grpc.ssl_server_credentials([(self.key_pem, self.cert_pem)])


def _named(name: str) -> str:
    return f"{name} (--{name.replace('_', '-')}, REWEIGHTER_{name.upper()})"


def server_tls(settings: Settings) -> ServerTLS | None:
    """The settings' TLS pair, checked; None when neither file is set (plain HTTP and gRPC)."""
    cert, key = settings.tls_cert_file, settings.tls_key_file
    if cert is None and key is None:
        return None
    for name, value, other in (("tls_key_file", key, "tls_cert_file"),
                               ("tls_cert_file", cert, "tls_key_file")):  # fmt: skip
        if value is None:
            raise TLSSettingsError(
                f"{_named(name)} is unset while {other} is set: TLS needs both files or neither"
            )
    assert cert is not None and key is not None
    pems = {}
    for name, path in (("tls_cert_file", cert), ("tls_key_file", key)):
        try:
            with open(path, "rb") as f:
                pems[name] = f.read()
        except OSError as e:
            raise TLSSettingsError(f"{_named(name)} {path!r}: cannot read it: {e}") from e
    try:  # the pair as both transports will load it: a mismatch or a bad PEM is refused here
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(cert, key)
    except (ssl.SSLError, OSError) as e:
        raise TLSSettingsError(
            f"tls_cert_file {cert!r} and tls_key_file {key!r}: not a certificate and its "
            f"private key in PEM: {e}"
        ) from e
    return ServerTLS(cert, key, pems["tls_cert_file"], pems["tls_key_file"])


def client_roots(ca_file: str | None) -> tuple[str, str] | None:
    """(where it came from, path) of the roots a client trusts: `ca_file`, else SSL_CERT_FILE;
    None: the system's roots."""
    if ca_file is not None:
        return "ca_file", ca_file
    if os.environ.get("SSL_CERT_FILE"):
        return "SSL_CERT_FILE", os.environ["SSL_CERT_FILE"]
    return None


def _read_roots(roots: tuple[str, str]) -> bytes:
    name, path = roots
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise ValueError(f"{name} {path!r}: cannot read it: {e}") from e


def http_ssl_context(ca_file: str | None) -> ssl.SSLContext:
    """The context of an `https://` client: verifies the server against the roots above."""
    roots = client_roots(ca_file)
    if roots is None:
        return ssl.create_default_context()
    try:
        return ssl.create_default_context(cadata=_read_roots(roots).decode("ascii"))
    except (ssl.SSLError, UnicodeDecodeError) as e:
        raise ValueError(f"{roots[0]} {roots[1]!r}: no PEM certificates in it: {e}") from e


def grpc_channel_credentials(ca_file: str | None) -> Any:  # grpc.ChannelCredentials
    """The credentials of a `grpcs://` client: the same roots as `http_ssl_context`."""
    import grpc

    roots = client_roots(ca_file)
    pem = None if roots is None else _read_roots(roots)
    return grpc.ssl_channel_credentials(root_certificates=pem)
