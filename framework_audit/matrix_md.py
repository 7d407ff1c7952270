"""The Markdown view of results/conformance/matrix.json: a function of the JSON alone."""

from __future__ import annotations

import json


def _cell(x) -> str:
    return str(x).replace("|", "\\|").replace("\n", " ")


def _num(x, digits: int = 4) -> str:
    return f"{x:.{digits}g}" if isinstance(x, int | float) else str(x)


def _row(card: dict, prop_start: str) -> dict:
    """The card's row whose property name starts with ``prop_start`` (names are the engine's)."""
    return next((r for r in card["rows"] if r["property"].startswith(prop_start)), {"values": {}, "verdict": "-"})


def _required(card: dict) -> tuple[int, int]:
    rows = [r for r in card["rows"] if r["verdict"] != "info"]
    return sum(r["verdict"] == "pass" for r in rows), len(rows)


def _extreme(row: dict) -> str:
    """'zero below log r = -20 (A > 0, A < 0)' from the row's thresholds; the measured text otherwise."""
    found = {}
    for sign in ("A > 0", "A < 0"):
        for side, hit in (row.get("values", {}).get(sign) or {}).items():
            word = "below" if side == "lower" else "above"
            found.setdefault(f"{hit['kind']} {word} log r = {_num(hit['threshold'], 3)}", []).append(sign)
    if found:
        return "; ".join(f"{k} ({', '.join(v)})" for k, v in found.items())
    return "as the closed form" if row.get("verdict") == "pass" else row.get("measured", "-")


def headline(card: dict) -> dict:
    """The few numbers a reader compares first, read from the card's rows."""
    on_policy = _row(card, "on-policy").get("values", {})
    empty = _row(card, "empty response").get("values", {})
    no_tokens = _row(card, "batch without tokens")
    ok, n = _required(card)
    return {
        "conforms": f"{'yes' if ok == n else 'no'} ({ok}/{n})",
        "on-policy factor A>0 / A<0": f"{_num(on_policy.get('factor_pos', '-'))} / "
                                      f"{_num(on_policy.get('factor_neg', '-'))}",
        "gradient rel. error": _num(_row(card, "per-token gradient (autograd)").get("values", {})
                                    .get("max_rel_error", "-"), 3),
        "aggregation": _row(card, "aggregation").get("values", {}).get("aggregation", "-"),
        "ratio level": _row(card, "importance-sampling level").get("values", {}).get("level", "-"),
        "extreme log-ratios (to 100)": _extreme(_row(card, "extreme")),
        "empty response": {True: "counted", False: "left out"}.get(empty.get("counted"), "-"),
        "batch without tokens": _num(no_tokens.get("values", {}).get("value", no_tokens.get("measured", "-"))),
        "value at r = 1": _row(card, "value at r = 1").get("values", {}).get("kind", "-"),
    }


def _settings(fw: dict):
    for s in fw["settings"]:
        yield s, s.get("card")


def _status(fw: dict, s: dict) -> str:
    if s["status"] == "import error":
        return f"import error: {fw['import_error']}"
    if s["status"] == "no such setting":
        return f"no such setting: {s['note']}"
    return s["status"]


def render(matrix: dict) -> str:
    fws = matrix["frameworks"]
    cards = [c for fw in fws for _, c in _settings(fw) if c]
    props = [r["property"] for r in cards[0]["rows"]] if cards else []
    out = [
        f"# {matrix['title']}",
        "",
        f"Written by `{matrix['command']}` on {matrix['generated']} from results/conformance/raw/ (one file per "
        "framework, each written inside that framework's own environment by `python -m framework_audit.run KEY`). "
        "Each framework's own SAPO loss, imported from its pinned, installed version, is audited by "
        "`sapo_lab.conformance.audit` in float64 against the paper's objective with tau_pos = 1, tau_neg = 1.05, "
        "at its defaults and at the setting that matches the paper. Generated: do not edit by hand.",
        "",
        "## Summary",
        "",
    ]
    keys = list(headline(cards[0])) if cards else []
    out += ["| framework | setting | options | " + " | ".join(keys) + " | last run |",
            "|---" * (len(keys) + 4) + "|"]
    for fw in fws:
        label = f"{fw['package']} {fw['version']}"
        if fw.get("status") == "not run":
            out.append(f"| {label} | - | - | not run |" + " |" * (len(keys) - 1) + " - |")
            continue
        for s, card in _settings(fw):
            opts = "-" if s["options"] is None else _cell(json.dumps(s["options"], sort_keys=True))
            if card is None:
                out.append(f"| {label} | {s['setting']} | {opts} | {_cell(_status(fw, s))} |"
                           + " |" * (len(keys) - 1) + f" {fw['date']} |")
                continue
            h = headline(card)
            out.append(f"| {label} | {s['setting']} | {opts} | " + " | ".join(_cell(h[k]) for k in keys)
                       + f" | {fw['date']} |")
    if props:
        out += ["", "## Verdicts", "", "Columns: " + "; ".join(f"P{i + 1} {p}" for i, p in enumerate(props)) + ".", ""]
        out += ["| framework | setting | " + " | ".join(f"P{i + 1}" for i in range(len(props))) + " |",
                "|---" * (len(props) + 2) + "|"]
        for fw in fws:
            for s, card in _settings(fw):
                if card:
                    verdicts = {r["property"]: r["verdict"] for r in card["rows"]}
                    cells = [verdicts.get(p, "-") for p in props]
                else:
                    cells = ["-"] * len(props)
                out.append(f"| {fw['package']} {fw['version']} | {s['setting']} | " + " | ".join(cells) + " |")
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
        if fw["import_error"]:
            out += [f"**Import error**: `{_cell(fw['import_error'])}`", ""]
        for s, card in _settings(fw):
            opts = "no option gives it" if s["options"] is None else f"`{json.dumps(s['options'], sort_keys=True)}`"
            out += [f"#### {s['setting']}: {opts}", "", s["note"] + ("." if s["note"] else ""), ""]
            if card is None:
                out += [_status(fw, s), ""]
                continue
            ok, n = _required(card)
            out += [f"{ok} of {n} required properties pass (expected ratio level: {card['level']}).", "",
                    "| property | paper | measured | verdict |", "|---|---|---|---|"]
            out += [f"| {_cell(r['property'])} | {_cell(r['expected'])} | {_cell(r['measured'])} | {r['verdict']} |"
                    for r in card["rows"]]
            out.append("")
    return "\n".join(out).rstrip() + "\n"
