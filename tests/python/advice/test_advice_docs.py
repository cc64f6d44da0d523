"""docs/advice.md documents every rule the registry runs, under the id that `docs` links to."""

import re
from pathlib import Path

from gpuprof.advice import RULE_IDS
from gpuprof.advice import rules as r

DOC = Path(__file__).resolve().parents[3] / "docs" / "advice.md"


def test_every_rule_has_a_section_with_trigger_fix_and_bound():
    text = DOC.read_text()
    headings = re.findall(r"^## (\w+)$", text, flags=re.M)
    assert [h for h in headings if h in RULE_IDS] == RULE_IDS  # all, in the registry's order
    for rule in RULE_IDS:
        body = text.split(f"\n## {rule}\n")[1].split("\n## ")[0]
        assert "Bound" in body and ("Trigger" in body or "High:" in body) and "Fix" in body or "fix" in body


def test_the_plugins_thresholds_are_the_documented_ones():
    text = DOC.read_text()
    assert r.DATALOADER_PCT == 5.0 and "DataLoader > 5% of the step *(plugin)*" in text
    assert r.COMMUNICATION_PCT == 10.0 and "Communication > 10% of the step *(plugin)*" in text
    assert r.LOW_UTILIZATION_PCT == 50.0 and "GPU utilization < 50% *(plugin)*" in text
    assert r.MEMORY_HIGH_PCT == 90.0 and "peak allocated > 90% of device memory *(plugin)*" in text
