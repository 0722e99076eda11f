"""Control-flow signals of a client library, which pass through hopchain's failure handling.

A handler may raise its client's own signals (FastStream's ``AckMessage``, ``NackMessage``,
``RejectMessage``) to steer acknowledgement. They are not failures: a stage neither retries
nor parks them. The engine knows no client, so each adapter registers its client's signals
when it is imported.
"""

from __future__ import annotations

__all__ = ["is_control_flow", "register_control_flow"]

_signals: tuple[type[BaseException], ...] = ()


def register_control_flow(*kinds: type[BaseException]) -> None:
    """Treat ``kinds`` (and their subclasses) as signals, not failures."""
    global _signals  # noqa: PLW0603 - set once per adapter, at its import
    _signals = (*_signals, *(kind for kind in kinds if kind not in _signals))


def is_control_flow(exc: BaseException) -> bool:
    """Whether ``exc`` is a registered client's signal, to be raised on untouched."""
    return bool(_signals) and isinstance(exc, _signals)
