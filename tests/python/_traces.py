"""Where the real traces are: ../shared/traces beside the checkout (tests skip when it is absent)."""

from pathlib import Path

TRACES = Path(__file__).resolve().parents[2].parent / "shared" / "traces"
