"""Declared studies: the spec, its runs, checkpoint rules, per-family scores, the results
table and the paired analysis. Built on ``sapo_lab.training``; nothing below imports it."""
