"""The published operating points' reading (sapo_lab.evidence.published), on points planted here with their
answers stated by hand: which method the source prints higher, a tie, and a collapse on one side or both."""

import pytest

from sapo_lab.evidence.published import OperatingPoint


def _point(sapo: str, grpo: str) -> OperatingPoint:
    return OperatingPoint(source="planted", label="planted", where="here", model="m", task="t", staleness="4",
                          metric="accuracy", sapo=sapo, grpo=grpo, other_differences="none")


# Catches: the comparison reversed (a higher SAPO number read as "GRPO higher"), a tie given to one method, the
# number read from the first word of a value that states it last, and one method's collapse read as both's.
@pytest.mark.parametrize(("sapo", "grpo", "reading"), [
    ("0.54", "0.48", "SAPO higher"),
    ("58.8", "58.9", "GRPO higher"),
    ("0.5", "0.50", "equal"),
    ("Avg@32 58.8", "Avg@32 58.9", "GRPO higher"),
    ("collapse", "collapse", "both collapse"),
    ("collapse", "0.41", "see source"),
    ("0.41", "collapse after 300 steps", "see source"),
])
def test_the_reading_of_a_planted_point(sapo, grpo, reading):
    assert _point(sapo, grpo).reading == reading
