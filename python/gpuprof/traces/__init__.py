"""Traces on disk: reading one trace file into a native ``Trace`` (``read``), finding trace files
and saved reports in folders (``folders``), and writing Chrome traces and saved spans (``export``).
Nothing here analyses a trace or imports torch."""
