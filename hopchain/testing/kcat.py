"""Records sent with kcat, as a shell user or a hostile producer would send them."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Protocol

__all__ = ["KcatSend", "kcat_sender"]


class KcatSend(Protocol):
    """Send one record per line to partition 0 of a topic, in one kcat run (one batch)."""

    async def __call__(
        self,
        topic: str,
        lines: Sequence[bytes],
        *,
        headers: Sequence[bytes] = (),
        compression: str = "none",
        keyed: bool = False,
    ) -> None:
        """``headers``: ``name=value`` each, on every record; ``keyed``: lines are ``key:value``."""


def kcat_sender(kcat: str, bootstrap: str) -> KcatSend:
    """A :class:`KcatSend` running the ``kcat`` executable against ``bootstrap``."""

    async def send(
        topic: str,
        lines: Sequence[bytes],
        *,
        headers: Sequence[bytes] = (),
        compression: str = "none",
        keyed: bool = False,
    ) -> None:
        arguments: list[str | bytes] = [kcat, "-P", "-b", bootstrap, "-t", topic, "-p", "0"]
        arguments += ["-z", compression, *(["-K", ":"] if keyed else [])]
        for header in headers:
            arguments += [b"-H", header]
        process = await asyncio.create_subprocess_exec(
            *arguments, stdin=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
        _, errors = await process.communicate(b"\n".join(lines) + b"\n")
        if process.returncode != 0:
            msg = f"kcat exited with {process.returncode}: {errors.decode(errors='replace')}"
            raise RuntimeError(msg)

    return send
