"""The gate map's standing sentence names up to four cells of each kind, then an ellipsis: tried with four cells
(all named, no ellipsis) and five (four named, then '…'). The cells' intervals are typed literals, so which
list a cell falls in is plain; the expected names are typed as the sentence writes them."""

from types import SimpleNamespace

from sapo_lab.evidence.gate_map import Cell, Setting, where_the_gate_stands

BELOW = SimpleNamespace(t_interval=(-0.08, -0.02))  # lies below zero: SAPO below GRPO


def _cell(tau, m):
    sapo = Setting(f"sapo_t{tau}_m{m}", "sapo", tau, 1.05, 2e-4, m)
    grpo = Setting(f"grpo_m{m}", "grpo", 1.0, 1.0, 2e-4, m)
    return Cell(sapo, grpo, declared_seeds=10, finished_pairs=10, in_declared_question=False, comparison=BELOW)


NAMES = ["τ 1, lr 0.0002, M 2", "τ 1, lr 0.0002, M 4", "τ 2, lr 0.0002, M 8", "τ 0.5, lr 0.0002, M 16",
         "τ 1, lr 0.0002, M 32"]
CELLS = [_cell(1.0, 2), _cell(1.0, 4), _cell(2.0, 8), _cell(0.5, 16), _cell(1.0, 32)]


def test_four_cells_below_zero_are_all_named_without_an_ellipsis():
    """catches: the list cut at three cells (one of four dropped, and no '…' to say so)."""
    sentence = where_the_gate_stands(CELLS[:4]).sentence()
    assert f"below it, with the interval below zero, in 4 ({'; '.join(NAMES[:4])});" in sentence, sentence
    assert "…" not in sentence


def test_a_fifth_cell_is_left_to_the_ellipsis():
    """catches: the ellipsis dropped, or the cut moved so that a fifth cell is named or a fourth is not."""
    sentence = where_the_gate_stands(CELLS).sentence()
    assert f"in 5 ({'; '.join(NAMES[:4])}; …);" in sentence, sentence
    assert NAMES[4] not in sentence
