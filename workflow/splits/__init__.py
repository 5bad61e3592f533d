"""Splits pipeline: demographic and topic splits of Reddit data and the Group Theorization task."""

__version__ = "0.1.0"
