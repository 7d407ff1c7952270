"""Hand-overs to other training engines. Each submodule imports its engine only inside functions,
so ``import sapo_lab`` never needs them."""
