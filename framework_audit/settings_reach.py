"""``results/conformance/settings_reach.json``: whether each framework's SAPO settings reach its loss.

One section per framework, each written by its own script in the framework's environment
(``settings_reach_trl.py``, ``settings_reach_axolotl.py``, ``settings_reach_verl.py``,
``settings_reach_twinkle.py``); ``render_md`` is the Markdown view of the file
(``settings_reach.md``), regenerated with ``python -m framework_audit.settings_reach``.
Standard library only: every framework environment imports it.
"""

from __future__ import annotations

import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JSON_PATH = os.path.join(ROOT, "results", "conformance", "settings_reach.json")
MD_PATH = os.path.join(ROOT, "results", "conformance", "settings_reach.md")


def _atomic_write(path: str, text: str) -> None:
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def write_section(path: str, key: str, section: dict) -> None:
    """Replace one framework's section of the JSON file, keeping the others; then rewrite the Markdown."""
    data = {}
    if os.path.exists(path):
        with open(path) as f:
            data = json.load(f)
    data[key] = section
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    _atomic_write(path, json.dumps(data, indent=1) + "\n")
    _atomic_write(os.path.splitext(path)[0] + ".md", render_md(data))


def _fmt(values) -> str:
    return ", ".join(f"{v:g}" for v in values) if values else "none"


def _short(text: str, limit: int = 200) -> str:
    """A table cell's share of a long message (the JSON keeps it whole)."""
    return text if len(text) <= limit else text[: limit - 3].rstrip() + "..."


def _span(pair) -> str:
    if not pair:
        return "-"
    lo, hi = pair
    return f"{lo:.4f}" if lo == hi else f"{lo:.4f} to {hi:.4f}"


def _trl_lines(s: dict, title: str | None = None) -> list[str]:
    src = s["paper_setting_source"]
    lines = [
        f"### {title or 'TRL ' + s['trl']}",
        "",
        *([f"Rollouts: {s['rollouts']}.", ""] if "rollouts" in s else []),
        f"Level: {s['level']}. Spy: {s['spy']}. A ratio counts as moved when |r - 1| > {s['r_tolerance']:g}; "
        "the temperatures are shown as the loss held them (its dtype); w(r) is the paper's gradient weight of "
        "the gate at the ratios the loss saw (1 at r = 1, as in GRPO).",
        "",
        "| setting | configured tau_pos / tau_neg | tau_pos seen | tau_neg seen | steps_per_generation | "
        "one update per rollout | tokens | share r != 1 (per step) | gate weight w(r) | reached |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in s["settings"].items():
        cfg = r["grpo_config"]
        per_step = " / ".join(f"{st['share_r_ne_1']:.3f}" for st in r["steps"] if st["gate_seen"])
        lines.append(
            f"| {name} | {cfg['sapo_temperature_pos']:g} / {cfg['sapo_temperature_neg']:g} | "
            f"{_fmt(r['tau_pos_seen'])} | {_fmt(r['tau_neg_seen'])} | {r['steps_per_generation']} | "
            f"{'yes' if r['one_update_per_rollout'] else 'no'} | {r['tokens']} | "
            f"{r['share_r_ne_1']:.3f} ({per_step}) | {_span(r['gate_weight_range'])} | "
            f"{'yes' if r['tau_reached'] else 'NO: ' + '; '.join(r['problems'])} |"
        )
    paper = s["settings"].get("paper")
    if paper is not None:
        on_policy = paper["one_update_per_rollout"] and paper["share_r_ne_1"] == 0
        verdict = ("runs on-policy: every ratio the loss saw was 1, where the SAPO gate's gradient weight is "
                   f"{_span(paper['gate_weight_range'])}, so SAPO trains as GRPO and the temperatures have no effect"
                   if on_policy else
                   f"is off-policy: a share {paper['share_r_ne_1']:.3f} of tokens had r != 1")
        on = "" if title is None else " on this trainer"
        lines += ["", f"TRL's documented paper setting ({src['repository']} `{src['path']}`, section "
                      f"\"{src['section']}\", commit {src['commit'][:12]}){on} {verdict}."]
    return lines


def _verl_lines(s: dict) -> list[str]:
    lines = [f"### verl {s['verl']}", "", f"Level: {s['level']}.", ""]
    lines += ["| overrides | tau_pos / tau_neg asked | composed | actor.tau_pos / tau_neg | loss saw | reached |",
              "|---|---|---|---|---|---|"]
    for name, r in s["settings"].items():
        asked = f"{r['asked']['tau_pos']:g} / {r['asked']['tau_neg']:g}"
        actor = (f"{r['actor_tau_pos']:g} / {r['actor_tau_neg']:g}" if r.get("actor_tau_pos") is not None else "-")
        seen = r.get("loss_tau_seen")
        saw = f"{_fmt(seen['tau_pos'])} / {_fmt(seen['tau_neg'])}" if seen else "-"
        composed = "yes" if r["composed"] else "no"
        outcome = "yes" if r["tau_reached"] else f"NO: {_short(r['outcome'])}"
        lines.append(f"| {name}: `{' '.join(r['overrides'])}` | {asked} | {composed} | {actor} | {saw} | {outcome} |")
    lines += ["", "Sources:"]
    lines += [f"- {src['what']}: {src['repository']} `{src['path']}` "
              f"{'lines' if '-' in src['lines'] else 'line'} {src['lines']} "
              f"({src['version']})" for src in s["sources"]]
    return lines


def _twinkle_lines(s: dict) -> list[str]:
    lines = [f"### twinkle-kit {s['twinkle_kit']}", "", f"Level: {s['level']}.", "",
             "| setting | set_loss keywords | tau_pos / tau_neg asked | loss saw | keywords dropped | reached |",
             "|---|---|---|---|---|---|"]
    for name, r in s["settings"].items():
        kwargs = ", ".join(f"{k}={v:g}" for k, v in r["kwargs"].items()) or "none"
        asked = f"{r['asked']['tau_pos']:g} / {r['asked']['tau_neg']:g}" if r["asked"] else "-"
        seen = r["tau_seen"]
        saw = f"{_fmt(seen['tau_pos'])} / {_fmt(seen['tau_neg'])}" if seen else f"refused: {_short(r['error'])}"
        reached = "-" if r["tau_reached"] is None else ("yes" if r["tau_reached"] else "NO")
        lines.append(f"| {name} | `{kwargs}` | {asked} | {saw} | {', '.join(r['dropped']) or 'none'} | {reached} |")
    lines += ["", "Sources:"]
    lines += [f"- {src['what']}: `{src['path']}` {'lines' if '-' in src['lines'] else 'line'} {src['lines']} "
              f"({src['version']})" for src in s["sources"]]
    return lines


def render_md(data: dict) -> str:
    """The Markdown view of settings_reach.json (a function of the JSON only)."""
    lines = ["# Do the SAPO settings reach the loss?", "",
             "Generated from `settings_reach.json` by `framework_audit/settings_reach.py`.", ""]
    if "trl" in data:
        lines += _trl_lines(data["trl"]) + [""]
    if "axolotl" in data:
        a = data["axolotl"]
        title = f"Axolotl {a['axolotl']}, async GRPO trainer, on TRL {a['trl']}"
        lines += _trl_lines(a, title) + [""]
    if "verl" in data:
        lines += _verl_lines(data["verl"]) + [""]
    if "twinkle_kit" in data:
        lines += _twinkle_lines(data["twinkle_kit"]) + [""]
    return "\n".join(lines)


def main() -> int:
    if not os.path.exists(JSON_PATH):
        print(f"error: {JSON_PATH} does not exist; run framework_audit/settings_reach_trl.py first", file=sys.stderr)
        return 2
    with open(JSON_PATH) as f:
        _atomic_write(MD_PATH, render_md(json.load(f)))
    print(f"wrote {MD_PATH}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
