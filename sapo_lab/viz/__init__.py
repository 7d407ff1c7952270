"""The book's figures and kernel-free explorers (plotly). Imports nothing of the training stack."""
