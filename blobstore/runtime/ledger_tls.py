"""Mutual TLS between the ledger client and the bookies (and, with the same files, to
ZooKeeper: `BLOBSTORE_ZK_TLS_DIR`, used by blobstore.runtime.zk_session).

Off by default (bookies on a private network, as today). On, every bookie and every
process that reads or writes ledgers (gateways, the maintenance job and its executors,
autorecovery, `blobstore admin`) reads the directory named by `BLOBSTORE_LEDGER_TLS_DIR`,
laid out as a Kubernetes TLS Secret with its CA (cert-manager's names):

- `ca.crt`: the cluster's certificate authority (PEM);
- `tls.crt`, `tls.key`: this process's certificate, signed by that CA, and its key.

Bookies accept only connections that present a certificate signed by the CA (TLS 1.2 at
least, CERT_REQUIRED); clients accept only bookies that do. The CA is the trust: a bookie
is known by its address, which a certificate need not name, so host names are not
checked; whoever holds a certificate of the cluster's CA is the cluster's. Keys are never
logged.

`write_cluster_tls` makes a CA and one certificate for every process of a single-machine
cluster (`blobstore standalone --ledger-tls`): ECDSA P-256, keys written mode 0600.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from blobstore.runtime.errors import UsageError
from blobstore.runtime.secret_files import write_new_file

LEDGER_TLS_DIR_ENV = "BLOBSTORE_LEDGER_TLS_DIR"
# The same layout, for the sessions to ZooKeeper (blobstore.runtime.zk_session).
ZK_TLS_DIR_ENV = "BLOBSTORE_ZK_TLS_DIR"
CA_FILE = "ca.crt"
CERT_FILE = "tls.crt"
KEY_FILE = "tls.key"
CA_KEY_FILE = "ca.key"  # only in directories write_cluster_tls made
VALIDITY_DAYS = 3650


@dataclass(frozen=True, slots=True)
class LedgerTls:
    """The PEM files of one process (see the module docstring)."""

    ca: Path
    cert: Path
    key: Path

    def server_context(self) -> ssl.SSLContext:
        """A bookie's: its certificate, and a client certificate of the CA required."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._load(context)
        context.verify_mode = ssl.CERT_REQUIRED
        return context

    def client_context(self) -> ssl.SSLContext:
        """A ledger client's: its certificate, and the bookie's checked against the CA."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False  # a bookie is known by its address (docstring)
        self._load(context)
        context.verify_mode = ssl.CERT_REQUIRED
        return context

    def _load(self, context: ssl.SSLContext) -> None:
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            context.load_cert_chain(self.cert, self.key)
            context.load_verify_locations(cafile=self.ca)
        except (OSError, ssl.SSLError) as e:
            raise UsageError(f"TLS files in {self.ca.parent}: {e}") from None


def ledger_tls_from_env(
    environ: Mapping[str, str] | None = None, variable: str = LEDGER_TLS_DIR_ENV
) -> LedgerTls | None:
    """The files of the directory `variable` names (BLOBSTORE_LEDGER_TLS_DIR, or
    BLOBSTORE_ZK_TLS_DIR for ZooKeeper's); None when it is not set. UsageError naming the
    first missing file."""
    env = os.environ if environ is None else environ
    directory = env.get(variable)
    if not directory:
        return None
    tls = LedgerTls(*(Path(directory) / name for name in (CA_FILE, CERT_FILE, KEY_FILE)))
    for path in (tls.ca, tls.cert, tls.key):
        if not path.is_file():
            raise UsageError(f"{variable}={directory}: no {path.name} there")
    return tls


def server_context_from_env() -> ssl.SSLContext | None:
    tls = ledger_tls_from_env()
    return None if tls is None else tls.server_context()


def client_context_from_env() -> ssl.SSLContext | None:
    tls = ledger_tls_from_env()
    return None if tls is None else tls.client_context()


# ---------------------------------------------------------------------- making them


def write_cluster_tls(directory: Path, hosts: tuple[str, ...] = ("127.0.0.1", "localhost")) -> None:
    """A new CA and one certificate it signs for `hosts`, in `directory` (created; keys
    mode 0600). FileExistsError when it holds a CA already: certificates are never
    replaced by accident."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    if (directory / CA_FILE).exists():
        raise FileExistsError(directory / CA_FILE)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "blobstore cluster CA")])
    ca_cert = (
        _builder(ca_name, ca_name, ca_key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    node_key = ec.generate_private_key(ec.SECP256R1())
    node_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "blobstore node")])
    node_cert = (
        _builder(node_name, ca_name, node_key.public_key())
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName([_general_name(h) for h in hosts]), False)
        .sign(ca_key, hashes.SHA256())
    )
    write_new_file(directory / CA_KEY_FILE, _key_pem(ca_key))
    write_new_file(directory / KEY_FILE, _key_pem(node_key))
    write_new_file(directory / CERT_FILE, node_cert.public_bytes(serialization.Encoding.PEM), 0o644)
    # The CA last: a directory holding it is whole (write_cluster_tls refuses to redo it).
    write_new_file(directory / CA_FILE, ca_cert.public_bytes(serialization.Encoding.PEM), 0o644)


def _builder(
    subject: x509.Name, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey
) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=VALIDITY_DAYS))
    )


def _general_name(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
