"""Distribution metadata, kept apart so the build backend can read it without importing."""

__version__ = "0.2.0"
