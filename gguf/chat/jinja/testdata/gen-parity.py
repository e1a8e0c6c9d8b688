#!/usr/bin/env python3
"""Regenerates parity.json: each snippet in parity-cases.txt (one a line)
rendered by Python's jinja2 set up as Hugging Face transformers renders
chat templates (a sandboxed environment with trim_blocks and
lstrip_blocks, loop controls, and a tojson that keeps non-ASCII), over
the data below. A snippet jinja2 refuses is recorded as an error. Run with
jinja2 3.1 and markupsafe 3, as transformers installs them (parity.json:
jinja2 3.1.6, markupsafe 3.0.3; Debian 12's markupsafe 2.1 escapes a Markup's
strip and partition arguments too):

    gen-parity.py > parity.json

TestParity renders each with this package and compares.
"""
import json, os, sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))

DATA = {
    "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "  Hé, what's 2+2?  "},
        {"role": "assistant", "content": "4"},
    ],
    "n": 3,
    "s": "Hé llo wörld",
    "f": 2.5,
    "l": [3, 1, 2],
    "d": {"b": 1, "a": None, "c": [1.0, "x"]},
    "empty": [],
}


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    return env


def main():
    env = environment()
    out = {"data": DATA, "cases": []}
    for line in open(os.path.join(HERE, "parity-cases.txt"), encoding="utf-8"):
        src = line.rstrip("\n").replace("\\n", "\n")
        if not src or src.startswith("#"):
            continue
        case = {"template": src}
        try:
            case["output"] = env.from_string(src).render(**DATA)
        except Exception as e:  # a refusal: the engine must refuse too
            case["error"] = type(e).__name__
        out["cases"].append(case)
    json.dump(out, sys.stdout, ensure_ascii=False, indent=1)
    sys.stdout.write("\n")


main()
