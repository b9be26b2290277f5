"""The product version, recorded in registry entries and output metadata."""

__version__ = "0.1.0"
