"""Benchmarks of hopchain against plain FastStream and plain aiokafka: ``make bench``."""
