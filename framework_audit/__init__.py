"""The SAPO conformance audit run on the frameworks' own installed code, one environment each.

``frameworks.py`` lists them; ``adapters/`` calls each one's own loss; ``run.py`` audits one framework
inside its environment; ``aggregate.py`` writes results/conformance/matrix.{json,md}.
"""
