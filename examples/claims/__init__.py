"""A claims pipeline (extract -> classify -> file) wrapped with hopchain, with faults."""
