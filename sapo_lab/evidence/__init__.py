"""What the committed studies show: reading their results, the statistics, and each study's findings.

Reading, never running: a chapter or a reviewer reads a study's folder here without training anything.

* :mod:`.results` -- a study's runs as written (``load_study``, ``results_root``), tags and bands;
* :mod:`.paired` -- paired comparisons, exact and t tests, Holm, power and sample sizes;
* :mod:`.analysis` -- a declaration's analysis block applied: endpoints, pairs, the declared tests;
* :mod:`.contrasts` -- declared contrasts between configurations (differences of gaps, trends);
* the findings, one module per study that has sentences of its own: :mod:`.confirmatory` (the
  confirmatory studies' answers), :mod:`.gate_map` (the gate map's cells and answers),
  :mod:`.published` (published operating points read beside the map);
* :mod:`.doctor_map` -- the gate-map cell nearest a run's gate activity, for ``sapo_lab doctor``.

A new study is a declaration (``experiments/NAME.json``) plus at most one findings module here.
"""
