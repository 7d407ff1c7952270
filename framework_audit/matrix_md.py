"""The Markdown view of results/conformance/matrix.json: a function of the JSON alone."""

from __future__ import annotations

import json

LEVEL_WORDS = {"training": "training, as the trainer calls it", "function": "function, as called"}
SHORT = {  # row names in the summary's "differs in" column
    "per-token gradient (autograd)": "gradient",
    "per-token gradient (finite differences of the value)": "value vs gradient",
    "on-policy gradient (r = 1)": "r = 1 factor",
    "gradient shape r*w_tau(r)": "gate shape",
    "temperature for A > 0": "tau A>0",
    "temperature for A < 0": "tau A<0",
    "temperature for A = 0": "tau A=0",
    "aggregation": "aggregation",
    "importance-sampling level": "level",
    "extreme log-ratios": "extreme log r",
    "zero advantages (equal-reward group)": "A = 0",
    "empty response in a batch": "empty response",
    "batch without tokens": "empty batch",
    "padding tokens": "padding",
    "batch order and size": "batch order/size",
}


def _cell(x) -> str:
    return str(x).replace("|", "\\|").replace("\n", " ")


def _row(card: dict, prop: str) -> dict:
    return next((r for r in card["rows"] if r["property"] == prop), {"values": {}, "verdict": "-", "measured": "-"})


def differing(card: dict) -> list[str]:
    """The checks of a card that are not a pass, in row order."""
    return [r["property"] for r in card["rows"] if r["verdict"] not in ("pass", "info")]


def extreme_text(card: dict) -> str:
    """The extreme-ratio row in a few words: finite, NaN above a threshold, or a credited clamp."""
    row = _row(card, "extreme log-ratios")
    found = []
    for sign in ("A > 0", "A < 0"):
        for side, hit in (row.get("values", {}).get(sign) or {}).items():
            word = "below" if side == "lower" else "above"
            kind = {"nonfinite": "NaN", "zero": "clamp", "frozen": "frozen"}.get(hit["kind"], hit["kind"])
            found.append(f"{kind} {word} {hit['threshold']:+.2f}" + (" (harmless)" if hit.get("harmless") else ""))
    found = list(dict.fromkeys(found))
    if not found:
        return "finite" if row.get("verdict") == "pass" else row.get("verdict", "-")
    return ", ".join(found)


def headline(entry: dict) -> dict:
    """The few things a reader compares first for one audited setting."""
    card, card32 = entry["card"], entry.get("card_float32")
    diff = differing(card)
    verdict = card.get("verdict") or ("CONFORMS" if not diff else f"DIFFERS in {len(diff)}")
    grad32 = _row(card32, "per-token gradient (autograd)") if card32 else {}
    return {
        "level": entry.get("finding_level", card.get("finding_level", "function")),
        "float64": verdict.split(":")[0].split(" (")[0],
        "differs in": ", ".join(SHORT.get(p, p) for p in diff) or "-",
        "float32: extreme log r": extreme_text(card32) if card32 else "-",
        "float32: gradient": grad32.get("verdict", "-"),
        "empty response": {True: "counted", False: "left out"}.get(
            _row(card, "empty response in a batch").get("values", {}).get("counted"), "-"),
        "old_logp": "detached" if not _row(card, "behaviour log-probs held constant").get("summary")
                    else "caller detaches",
    }


def _status(fw: dict, s: dict) -> str:
    if s["status"] == "import error":
        return f"import error: {fw['import_error']}"
    if s["status"] == "no such setting":
        return f"not audited: {s['note']}"
    if s["status"] == "cannot be audited":
        return f"cannot be audited: {s.get('error', '')}"
    return s["status"]


def _difference_lines(card: dict) -> list[str]:
    order = [r for r in card["rows"] if r["verdict"] not in ("pass", "info")]
    return [f"- {_cell(r.get('summary') or r['property'] + ': ' + r['measured'])}" for r in order]


def render(matrix: dict) -> str:
    fws = matrix["frameworks"]
    entries = [s for fw in fws for s in fw["settings"] if s.get("card")]
    keys = list(headline(entries[0])) if entries else []
    out = [
        f"# {matrix['title']}",
        "",
        f"Written by `{matrix['command']}` on {matrix['generated']} from results/conformance/raw/ (one file per "
        "framework, each written inside that framework's own environment by `python -m framework_audit.run KEY`). "
        "Each framework's own SAPO loss, imported from its pinned, installed version, is audited by "
        "`sapo_lab.conformance.audit` against the paper's objective with tau_pos = 1, tau_neg = 1.05, in float64 "
        "(the verdict) and in float32 (the dtype log-probs are trained in). *level* says what a finding "
        "describes: the loss called as the framework's trainer calls it (training) or as a function with the "
        "audit's arguments (function). Generated: do not edit by hand.",
        "",
        "## Summary",
        "",
        "| framework | setting | " + " | ".join(keys) + " |",
        "|---" * (len(keys) + 2) + "|",
    ]
    for fw in fws:
        label = f"{fw['package']} {fw['version']}"
        if fw.get("status") == "not run":
            out.append(f"| {label} | - | not run |" + " |" * (len(keys) - 1))
            continue
        for s in fw["settings"]:
            if not s.get("card"):
                out.append(f"| {label} | {s['setting']} | {_cell(_status(fw, s))} |" + " |" * (len(keys) - 1))
                continue
            h = headline(s)
            out.append(f"| {label} | {s['setting']} | " + " | ".join(_cell(h[k]) for k in keys) + " |")
    out += ["", "## Frameworks", ""]
    for fw in fws:
        out += [f"### {fw['package']} {fw['version']}", ""]
        if fw.get("status") == "not run":
            out += ["Not run: no raw result in results/conformance/raw/.", ""]
            continue
        env = fw.get("environment", {})
        built = (f"built in {env['build_seconds']} s, {env['size_mb']} MB; " if "build_seconds" in env
                 else f"{env['size_mb']} MB; " if "size_mb" in env else "")
        base = env.get("torch_base", {})
        if "build_seconds" in base:
            built += f"shared torch base built in {base['build_seconds']} s, {base['size_mb']} MB; "
        out += [f"Function: `{fw['function']}`. Last run {fw['date']}: `{fw['command']}` ({built}"
                f"import {env.get('import_seconds', '-')} s; audit source {fw.get('engine', '-')}).", "",
                "Versions: " + ", ".join(f"{k} {v}" for k, v in fw["versions"].items()) + ".", ""]
        if fw.get("sources"):
            out += ["Upstream source read (path in site-packages, lines, SHA-256 of the installed file):", ""]
            out += [f"- `{src['path']}` lines {src['lines'][0]}-{src['lines'][1]}, sha256 {src['sha256'][:16]}"
                    + ("" if src["matches_reading"] else " (**changed since the adapter's reading**)")
                    + (f": {src['what']}" if src.get("what") else "") for src in fw["sources"]]
            out.append("")
        if fw["import_error"]:
            out += [f"**Import error**: `{_cell(fw['import_error'])}`", ""]
        for s in fw["settings"]:
            opts = "no option gives it" if s["options"] is None else f"`{json.dumps(s['options'], sort_keys=True)}`"
            out += [f"#### {s['setting']}: {opts}", "", s["note"] + ("." if s["note"] else ""), ""]
            if not s.get("card"):
                out += [_status(fw, s), ""]
                continue
            out += [f"Level: {LEVEL_WORDS.get(s.get('finding_level', 'function'))}.", ""]
            for key in ("card", "card_float32"):
                card = s.get(key)
                if card:
                    out += [f"**{card.get('verdict', '-')}**", "", *_difference_lines(card), ""]
            card = s["card"]
            out += ["| property | paper | measured (float64) | verdict | float32 |", "|---|---|---|---|---|"]
            v32 = {r["property"]: r["verdict"] for r in (s.get("card_float32") or {}).get("rows", [])}
            out += [f"| {_cell(r['property'])} | {_cell(r['expected'])} | {_cell(r['measured'])} | {r['verdict']} "
                    f"| {v32.get(r['property'], '-')} |" for r in card["rows"]]
            out.append("")
    return "\n".join(out).rstrip() + "\n"
