"""The dead-letter service's settings: the ``dlq_*`` fields of :class:`~hopchain.HopchainConfig`.

``DlqSettings`` is the same class, kept as the name the dead-letter modules have always
taken; there is one configuration object (see :mod:`hopchain.config`).
"""

from __future__ import annotations

from hopchain.config import DEFAULT_RESOLUTIONS_TOPIC, DEFAULT_TOPIC_PATTERN, HopchainConfig

__all__ = ["DEFAULT_RESOLUTIONS_TOPIC", "DEFAULT_TOPIC_PATTERN", "DlqSettings"]

DlqSettings = HopchainConfig
