"""An optional SASL_PLAINTEXT listener for the local broker: users, properties, format flags.

The listener accepts two mechanisms: ``PLAIN`` (users and passwords in the JAAS line of
``server.properties``) and ``SCRAM-SHA-256`` (credentials written into the cluster metadata
when the storage is formatted, ``StorageTool format --add-scram``). The PLAINTEXT listener
stays as it is, for inter-broker traffic and for tools that do not authenticate.

This is for tests of authentication on the loopback interface: passwords travel and are
stored in clear text (SASL_PLAINTEXT, a readable ``server.properties``); use TLS and a
secret store anywhere else.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass

from hopchain.exceptions import LocalKafkaError

__all__ = ["SASL_LISTENER", "SASL_MECHANISMS", "SaslListener"]

SASL_LISTENER = "SASL_PLAINTEXT"
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256")
"""Mechanisms the SASL listener enables, in the order the broker is told."""

_USER = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
# Printable ASCII without the characters that the JAAS line ('"', '\\'), the properties file
# ('\\') or StorageTool's --add-scram syntax (',', '[', ']', '=') would read specially.
_PASSWORD = re.compile(r"^[!#-+\-./0-9:;<>?@A-Z^_`a-z{|}~]{1,128}$")
_PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
_SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"


@dataclass(frozen=True)
class SaslListener:
    """The users of a SASL listener; every user may log in with either mechanism.

    Raises:
        LocalKafkaError: a user name or password uses characters the broker's
            configuration syntax would misread (the message says which are allowed).
    """

    users: Mapping[str, str]

    def __post_init__(self) -> None:
        if not self.users:
            raise LocalKafkaError("a SASL listener needs at least one user (sasl_users)")
        for name, password in self.users.items():
            if not _USER.match(name):
                raise LocalKafkaError(
                    f"SASL user name {name!r} must be 1-64 of letters, digits, '_', '.', '-'"
                )
            if not _PASSWORD.match(password):
                raise LocalKafkaError(
                    f"the password of SASL user {name!r} must be 1-128 printable ASCII "
                    "characters other than space, quote, backslash, ',', '=', '[' and ']'"
                )

    @property
    def fingerprint(self) -> str:
        """A digest of the users and passwords, recorded with the storage format.

        SCRAM credentials are written once, when the storage is formatted: a kept data
        directory started with other users must be formatted again.
        """
        material = "\n".join(f"{name}\x1f{self.users[name]}" for name in sorted(self.users))
        return hashlib.sha256(material.encode()).hexdigest()

    def listener(self, port: int) -> str:
        """The ``listeners`` entry (with its leading comma)."""
        return f",{SASL_LISTENER}://127.0.0.1:{port}"

    def settings(self) -> str:
        """Properties that enable the mechanisms and declare the PLAIN users."""
        prefix = f"listener.name.{SASL_LISTENER.lower()}"
        plain_users = " ".join(f'user_{name}="{pw}"' for name, pw in sorted(self.users.items()))
        return "\n".join(
            (
                "# SASL_PLAINTEXT listener for authentication tests (hopchain LocalKafka).",
                f"{prefix}.sasl.enabled.mechanisms={','.join(SASL_MECHANISMS)}",
                f"{prefix}.plain.sasl.jaas.config={_PLAIN_MODULE} required {plain_users};",
                f"{prefix}.scram-sha-256.sasl.jaas.config={_SCRAM_MODULE} required;",
                "",
            )
        )

    def format_arguments(self) -> list[str]:
        """``StorageTool format`` arguments that create the SCRAM-SHA-256 credentials."""
        arguments: list[str] = []
        for name, password in sorted(self.users.items()):
            arguments += ["--add-scram", f"SCRAM-SHA-256=[name={name},password={password}]"]
        return arguments
