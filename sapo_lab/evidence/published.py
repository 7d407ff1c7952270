"""Published SAPO-against-GRPO operating points, as their sources print them, for reading beside the gate map.

Each is one training run per method at one setting, at a scale this book cannot run: a point to place
the toy map beside, not a replicate of it. ``other_differences`` names what else changed between the two
runs, so a reader does not take the difference for the gate's alone.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class OperatingPoint:
    """One published SAPO run beside one GRPO run."""

    source: str  # bibliography key
    label: str  # how a table names it
    where: str  # table or file in the source
    model: str
    task: str
    staleness: str  # optimizer updates per rollout batch, as the source sets it
    metric: str
    sapo: str
    grpo: str
    other_differences: str
    runs_per_method: int = 1

    @property
    def reading(self) -> str:
        """Which method the source prints higher, or that they tie."""
        try:
            s, g = float(self.sapo.split()[-1]), float(self.grpo.split()[-1])
        except ValueError:
            return "both collapse" if "collapse" in self.sapo and "collapse" in self.grpo else "see source"
        return "SAPO higher" if s > g else "GRPO higher" if g > s else "equal"


POINTS = (
    OperatingPoint(
        source="fu2026maspo",
        label="MASPO (Fu et al., 2026)",
        where="main results, 7B",
        model="7B dense",
        task="mathematics (AIME, AMC, MATH500, Minerva, OlympiadBench)",
        staleness="4",
        metric="Avg@32, mean over benchmarks",
        sapo="58.8",
        grpo="58.9",
        other_differences="none reported",
    ),
    OperatingPoint(
        source="zheng2025easyr1",
        label="EasyR1 baselines (2025)",
        where="assets/baselines.md at commit b44b311 (v0.3.2 runs)",
        model="Qwen2.5-VL-7B-Instruct",
        task="Geometry3k",
        staleness="4 (example config: rollout batch 512, update batch 128)",
        metric="test accuracy after training (before: 0.37)",
        sapo="0.54",
        grpo="0.48",
        other_differences="GRPO trained with a KL penalty of 1e-2, SAPO with none",
    ),
    OperatingPoint(
        source="shen2026vespo",
        label="VESPO (Shen et al., 2026)",
        where="staleness experiments",
        model="dense and MoE models",
        task="mathematics",
        staleness="4",
        metric="training stability",
        sapo="collapse",
        grpo="collapse",
        other_differences="none reported",
    ),
)
