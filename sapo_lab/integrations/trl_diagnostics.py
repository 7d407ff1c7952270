"""SAPO's gate and ratio statistics for a TRL run: what ``sapo_lab`` logs for its own runs, in TRL's log.

TRL's ``GRPOTrainer`` logs clip ratios for its clipped losses and nothing about the ratio or the gate for
``loss_type="sapo"``. :func:`sapo_diagnostics_trainer` returns a subclass of it that, after TRL's own
``_compute_loss`` has run unchanged, adds to TRL's ``_metrics`` (averaged over the logging window like
TRL's own keys, and written to ``trainer_state.json``'s ``log_history``):

* ``sapo/ratio_q01``, ``sapo/ratio_q99``: the 1% and 99% quantiles of r = π/π_old over the completion
  tokens with a nonzero advantage (at ``importance_sampling_level="sequence"``, each token carries its
  response's ratio); every statistic is over these tokens, the ones that carry a gradient;
* ``sapo/max_abs_log_ratio``: the largest |log r|;
* ``sapo/gate_weight_mean``: the token mean of SAPO's gate weight w(r) = sech²(τ(r - 1)/2), τ by the sign
  of the advantage as TRL chooses it;
* ``sapo/signal_removed_frac``: the share of the importance-weighted signal α|A|r that the gate removes,
  Σ α|A|r(1 - w) / Σ α|A|r, α the loss's per-response weight (sapo_lab's
  ``losses/signal_removed_frac``, by the same functions of :mod:`sapo_lab.objective`).

The names are :data:`sapo_lab.runs.doctor.TRL_DIAGNOSTICS`, which ``python -m sapo_lab doctor`` reads.
The statistics use the log-probabilities TRL's loss computed (captured as they pass, no second forward),
under ``torch.no_grad``: the loss and its gradient are TRL's, bit for bit. The gate statistics leave out
what TRL multiplies in after the gate (vLLM's importance-sampling correction, the off-policy and entropy
masks). With several processes each value is the mean of the processes' values.

Usage::

    from sapo_lab.integrations.trl_diagnostics import sapo_diagnostics_trainer
    trainer = sapo_diagnostics_trainer()(model=..., reward_funcs=..., args=GRPOConfig(loss_type="sapo", ...))
"""

from __future__ import annotations

import math

import torch

from ..objective.gates import log_gate_weight, token_temperatures
from ..objective.losses import level_log_ratio, signal_removed_split
from ..objective.masks import aggregation_weights
from ..runs.doctor import TRL_DIAGNOSTICS

NAMES = TRL_DIAGNOSTICS  # doctor series -> TRL metric name


@torch.no_grad()
def gate_statistics(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, *,
                    tau_pos: float, tau_neg: float, level: str = "token") -> dict[str, float]:
    """The ``sapo/`` statistics of one loss call, keyed by TRL metric name.

    ``logp`` and ``old_logp`` are (B, T) log-probabilities of the completion tokens, ``advantages`` (B,),
    (B, 1) or (B, T), ``mask`` (B, T) the tokens the loss averages over. Every statistic is over the tokens
    with a nonzero advantage, the ones that carry a gradient (as sapo_lab's, whose updates skip the others);
    without such a token every value is NaN, which TRL's log leaves out of its window mean (null if all are).
    """
    valid = mask.bool()
    z = torch.where(valid, (logp.detach() - old_logp.detach()).double(), torch.zeros((), dtype=torch.float64,
                                                                                      device=logp.device))
    z = level_log_ratio(z, valid, level)
    adv = advantages.detach().double()
    adv = (adv[:, None] if adv.dim() == 1 else adv).expand_as(z)
    signed = valid & (adv != 0)
    if not bool(signed.any()):
        return dict.fromkeys(NAMES.values(), math.nan)
    log_w = log_gate_weight(torch.exp(z), token_temperatures(adv, tau_pos, tau_neg))
    weight = aggregation_weights(valid, "per_response", dtype=torch.float64)
    zs, a, lw, alpha = z[signed], adv[signed], log_w[signed], weight[signed]
    ratio = torch.exp(zs)
    split = signal_removed_split(zs, a, alpha, lw)
    # signal_removed_frac = sum over the sign x side cells of share x removed (a cell without signal adds 0)
    cells = [(k.removeprefix("signal_share_"), v) for k, v in split.items() if k.startswith("signal_share_")]
    removed = sum(share * split[f"signal_removed_frac_{cell}"] for cell, share in cells if share > 0)
    return {
        NAMES["ratio_q01"]: float(torch.quantile(ratio, 0.01)),
        NAMES["ratio_q99"]: float(torch.quantile(ratio, 0.99)),
        NAMES["max_abs_log_ratio"]: float(zs.abs().max()),
        NAMES["gate_weight_mean"]: float(torch.exp(lw).mean()),
        NAMES["signal_removed"]: float(removed),
    }


def sapo_diagnostics_trainer(base=None):
    """A subclass of ``base`` (default ``trl.GRPOTrainer``) that logs :func:`gate_statistics` for ``loss_type="sapo"``.

    Any other ``loss_type`` is refused when the trainer is built: the statistics describe SAPO's gate.
    """
    if base is None:
        from trl import GRPOTrainer as base

    class SAPODiagnosticsGRPOTrainer(base):
        """TRL's GRPOTrainer, loss unchanged, with SAPO's gate statistics in its log (``sapo/...``)."""

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            if self.loss_type != "sapo":
                raise ValueError(f"the SAPO diagnostics describe SAPO's gate; loss_type is {self.loss_type!r}, "
                                 "use trl.GRPOTrainer for it")
            self._sapo_capture: list | None = None

        def _get_per_token_logps_and_entropies(self, *args, **kwargs):
            out = super()._get_per_token_logps_and_entropies(*args, **kwargs)
            if self._sapo_capture is not None:  # inside _compute_loss: the log-probs the loss uses
                self._sapo_capture.append(out[0])
            return out

        def _compute_loss(self, model, inputs):
            self._sapo_capture = []
            try:
                loss = super()._compute_loss(model, inputs)
            finally:
                captured, self._sapo_capture = self._sapo_capture, None
            if captured:
                self._log_gate_statistics(captured[0], inputs)
            return loss

        def _log_gate_statistics(self, logp, inputs):
            mask = inputs["completion_mask"]
            if "tool_mask" in inputs:
                mask = mask * inputs["tool_mask"]
            old = inputs.get("old_per_token_logps")
            stats = gate_statistics(logp, logp if old is None else old, inputs["advantages"], mask,
                                    tau_pos=self.args.sapo_temperature_pos, tau_neg=self.args.sapo_temperature_neg,
                                    level=self.importance_sampling_level)
            values = torch.tensor(list(stats.values()), dtype=torch.float64, device=logp.device)
            if self.accelerator.num_processes > 1:
                values = self.accelerator.gather(values[None]).nanmean(dim=0)
            mode = "train" if self.model.training else "eval"
            for name, value in zip(stats, values.tolist(), strict=True):
                self._metrics[mode][name].append(value)

    return SAPODiagnosticsGRPOTrainer
