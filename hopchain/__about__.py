"""hopchain's version, a literal so that importing hopchain reads no package metadata.

The build takes the version from the crate (core/Cargo.toml); tests/test_quickstart.py holds
this literal, the crate's version and the installed package's metadata to one number.
"""

__version__ = "0.2.0"
