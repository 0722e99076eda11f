"""hopchain: the failure path of Kafka services as a typed, validated, append-only contract."""

from hopchain.__about__ import __version__

__all__ = ["__version__"]
