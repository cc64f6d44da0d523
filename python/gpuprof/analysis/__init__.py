"""Analyses over several reports: cross-rank (``ranks``) and scaling studies (``scaling``).

Pure functions over plain dicts (per-rank summaries, report dicts): no torch, no native code, so they
are unit-testable with hand-built ranks and shared by live runs and folders of traces.
"""
