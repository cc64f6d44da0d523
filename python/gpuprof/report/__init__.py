"""The Report model and its renderers (one module per output format)."""

from .model import SCHEMA_VERSION, Report

__all__ = ["Report", "SCHEMA_VERSION"]
