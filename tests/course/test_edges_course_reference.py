"""The grader's fresh inputs and the handout's defaults, against anchors outside reference.py: the skeleton's
own signatures (assignment/sapo_assignment.py, read with ast), and properties of each batch worked out by hand
(a single-token response, a ratio of e^7.5, long responses whose product of ratios overflows both ways)."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import torch

from sapo_lab.course import reference

SKELETON = Path(__file__).resolve().parents[2] / "assignment" / "sapo_assignment.py"


def skeleton_defaults() -> dict:
    """function -> {argument: default} of the handout's skeleton, read from its source."""
    out = {}
    for node in ast.parse(SKELETON.read_text()).body:
        if isinstance(node, ast.FunctionDef) and node.args.defaults:
            names = [a.arg for a in node.args.args][-len(node.args.defaults):]
            out[node.name] = {n: ast.literal_eval(d) for n, d in zip(names, node.args.defaults, strict=True)}
    return out


def test_the_defaults_the_grader_names_are_the_skeletons():
    """catches: a default in DEFAULTS that differs from the handout's skeleton (update_loss's tau_neg 1.0 for
    1.05), which the grader prints to a student whose function fails only on its defaults."""
    skeleton = skeleton_defaults()
    for part, defaults in reference.DEFAULTS.items():
        assert defaults == skeleton[part], part
    assert set(skeleton) - set(reference.DEFAULTS) == {"masked_mean"}  # its default is checked by the harness


def test_every_batch_holds_a_full_length_and_a_single_token_response():
    """catches: the last response no longer a single token (the edge where a mean over one token is the token)."""
    for case in reference.fresh_cases(11):
        lengths = case["mask"].sum(-1)
        assert lengths[0] == case["mask"].shape[1]
        assert lengths[-1] == 1


def test_the_far_batches_hold_a_ratio_of_e_to_the_7_5():
    """catches: the largest ratio moved off e^7.5 (about 1808), where exp(x) / (1 + exp(x)) overflows."""
    far, far_g2, near = reference.fresh_cases(11)
    for case in (far, far_g2):
        assert math.isclose(float(case["logp"][0, 0] - case["behavior_logp"][0, 0]), 7.5, abs_tol=1e-12)
    assert float((near["logp"] - near["behavior_logp"]).max()) < 3.0  # the third batch stays near 1


def test_the_gate_is_graded_at_tau_neg_and_moved_temperatures_reach_it():
    """catches: the gate's tau taken from tau_pos (1.0 by default, where 4 / tau and 4 tau agree) instead of
    tau_neg: with tau_pos 0.7 and tau_neg 2.0 the gate must get 2.0, and 1.05 when neither is given."""
    case = reference.fresh_cases(11)[0]
    assert reference.arguments("sapo_gate", case, {"tau_pos": 0.7, "tau_neg": 2.0})["tau"] == 2.0
    assert reference.arguments("sapo_gate", case, {})["tau"] == 1.05
    assert reference.arguments("sapo_gate", case)["tau"] == 1.05


def test_long_responses_overflow_a_product_of_ratios_both_ways():
    """catches: the long case shifted one way only (a sum of log-ratios past +709 but none below -745), so a
    product of token ratios that underflows to 0 goes ungraded. Row 0 averages about +0.8 over 1000 tokens
    (a sum near +800), row 1 about -0.8 (near -800): exp overflows to inf and underflows to 0."""
    case = reference.long_responses(3)
    sums = ((case["logp"] - case["behavior_logp"]) * case["mask"]).sum(-1)
    assert float(sums[0]) > 709.8 and float(sums[1]) < -745.2
    assert math.isinf(float(torch.exp(sums[0]))) and float(torch.exp(sums[1])) == 0.0
    assert case["mask"][2].sum() == 500
