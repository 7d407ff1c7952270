"""The book's figures and kernel-free explorers (plotly).

:mod:`.explore` imports nothing of the training stack (it loads without torch);
:mod:`.plots` reads run folders through :mod:`sapo_lab.runs.run_folder`.
"""
