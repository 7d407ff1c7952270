"""What the student's process may send the grading process, checked as untrusted data.

The student's code runs in the process that writes these messages, so any of them may be forged: each line is
parsed against the schema below (the event's name, its exact keys, their types, sizes and, for a call, a key the
grader asked that process for) and anything else is returned as one line saying what was wrong, never raised.
Every text the student's process sends is cut to one printable line before it can reach a report.
"""

from __future__ import annotations

import json
import re

MAX_LINE = 4 * 2**20  # bytes of one message
MAX_TEXT = 300  # characters of one message's text kept
MAX_NUMBERS = 100_000  # numbers in one call's outputs
MAX_DEPTH = 8  # nesting of the lists in an output (a (B, T) gradient is 2; a wrong shape may be deeper)
# part -> the outputs the harness records for one call (sandbox.observe_with_meta)
LOSS_OUTPUTS = ("value", "grad_logp", "grad_behavior_logp")
OUTPUT_KEYS = {
    "group_advantages": ("value",), "sapo_gate": ("value", "grad_ratio"),
    "masked_mean": ("per_response", "token_pool", "grad_per_response", "grad_token_pool"),
    "clipped_surrogate_loss": LOSS_OUTPUTS, "sapo_loss": LOSS_OUTPUTS, "gspo_sequence_ratio": LOSS_OUTPUTS,
    "update_loss": LOSS_OUTPUTS,
}
PLAIN_EVENTS = ("ready", "imported", "done")
TEXT_EVENTS = ("refused", "import_failed")


class Malformed(ValueError):
    """One message broke the schema; the text says how, in one line."""


def one_line(text, limit: int = MAX_TEXT) -> str:
    """``text`` as one printable line of at most ``limit`` characters: a control character (a newline, a
    terminal's escape sequence) becomes '?' and a run of spaces one space, so a message can neither forge or
    overwrite the report's lines nor line up a column that looks like one of them ("total   85/85")."""
    if not isinstance(text, str):
        text = repr(text)
    cleaned = "".join(c if c.isprintable() else "?" for c in text[: limit + 1])
    cleaned = re.sub(" {2,}", " ", cleaned)
    return cleaned[:limit] + ("..." if len(cleaned) > limit else "")


def _text(value, what: str) -> str:
    if not isinstance(value, str):
        raise Malformed(f"{what} is {_kind(value)}, not text")
    return one_line(value)


def _kind(value) -> str:
    name = type(value).__name__
    return {"dict": "an object", "list": "a list", "str": "text", "NoneType": "null", "bool": "a boolean",
            "int": "a number", "float": "a number"}.get(name, name)


def _keys(record: dict, required: tuple, event: str) -> None:
    if set(record) != {"event", *required}:
        extra = sorted(set(record) - {"event", *required})
        missing = sorted({*required} - set(record))
        said = f"unexpected keys {extra}" if extra else f"missing keys {missing}"
        raise Malformed(f"a {event!r} message with {one_line(said, 80)}")


def _count_numbers(value, depth: int, budget: list) -> None:
    """Check a recorded output: a number, a type's name ("<int>"), or lists of them at most MAX_DEPTH deep."""
    if isinstance(value, (bool, int, float)):
        if type(value) is int and abs(value) > 2**64:
            raise Malformed("an output holds an integer too large to be a tensor's")
        budget[0] -= 1
        if budget[0] < 0:
            raise Malformed(f"an output holds more than {MAX_NUMBERS} numbers")
        return
    if isinstance(value, str):
        if not (value.startswith("<") and value.endswith(">") and len(value) <= 100):
            raise Malformed("an output holds text other than a type's name")
        return
    if isinstance(value, list):
        if depth >= MAX_DEPTH:
            raise Malformed(f"an output nests lists more than {MAX_DEPTH} deep")
        for item in value:
            if isinstance(item, str):
                raise Malformed("an output's list holds text")
            _count_numbers(item, depth + 1, budget)
        return
    raise Malformed(f"an output is {_kind(value)}")


def _outputs(part: str, outputs, meta) -> None:
    if not isinstance(outputs, dict) or not isinstance(meta, dict):
        raise Malformed(f"a result whose outputs are {_kind(outputs)} and meta {_kind(meta)}, not objects")
    keys = OUTPUT_KEYS[part]
    if set(outputs) != set(keys):
        raise Malformed(f"a result of {part} whose outputs are not {list(keys)}")
    budget = [MAX_NUMBERS]
    for key in keys:
        value = outputs[key]
        if value is None and key.startswith("grad_"):
            continue
        _count_numbers(value, 0, budget)
    described = [k for k in keys if not k.startswith("grad_")]
    if set(meta) != set(described):
        raise Malformed(f"a result of {part} whose meta is not {described}")
    for key in described:
        m = meta[key]
        if not isinstance(m, dict):
            raise Malformed(f"meta of {key} is {_kind(m)}, not an object")
        if set(m) == {"type"}:
            _text(m["type"], f"meta of {key}'s type")
        elif set(m) == {"shape", "dtype"}:
            shape = m["shape"]
            if not (isinstance(shape, list) and len(shape) <= 8
                    and all(type(n) is int and 0 <= n <= 2**31 for n in shape)):
                raise Malformed(f"meta of {key} has a shape that is not a list of sizes")
            _text(m["dtype"], f"meta of {key}'s dtype")
        else:
            raise Malformed(f"meta of {key} is neither a type nor a shape and dtype")


def parse_event(line: bytes, calls: dict) -> dict:
    """One line the harness sent, checked: ``calls`` maps each key this process was asked to run to its part.
    Returns the event, its texts cut to one line; Malformed (one line) for anything else."""
    if len(line) > MAX_LINE:
        raise Malformed(f"a message of more than {MAX_LINE} bytes")
    try:
        record = json.loads(line)
    except (ValueError, RecursionError):
        raise Malformed("a line that is not JSON") from None
    if not isinstance(record, dict):
        raise Malformed(f"a message that is {_kind(record)}, not an object")
    event = record.get("event")
    if not isinstance(event, str):
        raise Malformed(f"a message whose event is {_kind(event)}")
    if event in PLAIN_EVENTS:
        _keys(record, (), event)
        return {"event": event}
    if event in TEXT_EVENTS:
        _keys(record, ("message",), event)
        return {"event": event, "message": _text(record["message"], f"a {event!r} message")}
    if event not in ("start", "result"):
        raise Malformed(f"an unknown event {one_line(event, 40)!r}")
    key = record.get("key")
    if not isinstance(key, str):
        raise Malformed(f"a {event!r} message whose key is {_kind(key)}, not text")
    if key not in calls:
        raise Malformed(f"a {event!r} message for {one_line(key, 80)!r}, a call this process was not asked for")
    if event == "start":
        _keys(record, ("key",), event)
        return {"event": event, "key": key}
    if "error" in record:
        _keys(record, ("key", "error"), event)
        return {"event": event, "key": key, "error": _text(record["error"], "a result's error")}
    _keys(record, ("key", "outputs", "meta"), event)
    _outputs(calls[key], record["outputs"], record["meta"])
    return {"event": event, "key": key, "outputs": record["outputs"], "meta": record["meta"]}


def parse_reply(line: bytes) -> dict:
    """One reply header of the training part's loss service, checked: exactly one of a finite or infinite loss
    (a number), an error (text), ``not_implemented`` (true) or a refusal (text); Malformed otherwise."""
    if len(line) > MAX_LINE:
        raise Malformed(f"a reply of more than {MAX_LINE} bytes")
    try:
        reply = json.loads(line)
    except (ValueError, RecursionError):
        raise Malformed("a reply that is not JSON") from None
    if not isinstance(reply, dict) or len(reply) != 1:
        raise Malformed(f"a reply that is {_kind(reply)} of {len(reply) if isinstance(reply, dict) else 0} keys, "
                        "not one")
    (key, value), = reply.items()
    if key == "loss":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise Malformed(f"a loss that is {_kind(value)}, not a number")
        if isinstance(value, int) and abs(value) > 2**63:
            raise Malformed("a loss too large to be a float")
        return {"loss": float(value)}
    if key in ("error", "refused"):
        return {key: _text(value, f"a reply's {key}")}
    if key == "not_implemented" and value is True:
        return {key: True}
    raise Malformed(f"a reply with the key {one_line(key, 40)!r}")
