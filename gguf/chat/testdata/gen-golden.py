#!/usr/bin/env python3
"""Regenerates golden.json: every template in templates/ rendered over the
conversations in conversations.json by Python's jinja2, set up the way
Hugging Face transformers renders chat templates (apply_chat_template):
a sandboxed environment with trim_blocks and lstrip_blocks, loop controls,
the {% generation %} block (transformers' AssistantTracker),
raise_exception, a tojson that keeps non-ASCII, and strftime_now (pinned
to 2026-01-15 so the output is reproducible). Run with jinja2 3.1 and
markupsafe 3, as transformers installs them (golden.json: jinja2 3.1.6,
markupsafe 3.0.3; Debian 12's python3-markupsafe 2.1 escapes otherwise):

    gen-golden.py [TEMPLATE_DIR] > golden.json

TEMPLATE_DIR defaults to templates/ beside this script.

Conversations with "tools" are OpenAI requests: their messages are handed
to the template the way meshnode's chat.Render hands them (and the way
Hugging Face documents tool use): a null content as "", tool_calls,
tool_call_id and name only when present, and each call's arguments, which
OpenAI sends as JSON text, as the object they decode to. They are rendered
only by templates that take tools (whose source mentions them); the others
get meshnode's generic polyfill, which chat's own tests pin. A conversation
without tools leaves tools undefined (transformers passes None, on which
the Hermes tool-use template fails to iterate; every other template here
renders the same either way).
"""
import datetime, json, os, sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
NOW = datetime.datetime(2026, 1, 15, 9, 30, 0)


class TemplateError(Exception):
    pass


def raise_exception(message):
    raise TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


class AssistantTracker(jinja2.ext.Extension):
    """transformers' {% generation %} … {% endgeneration %}: it marks the
    assistant's tokens for training masks and renders its body as it is."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols, AssistantTracker])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: NOW.strftime(fmt)
    return env


def hf_message(m):
    out = {"role": m["role"], "content": m.get("content") or ""}
    if m.get("tool_calls"):
        calls = []
        for c in m["tool_calls"]:
            args = c["function"]["arguments"]
            try:
                decoded = json.loads(args)
                if isinstance(decoded, dict):
                    args = decoded
            except ValueError:
                pass
            calls.append({"id": c["id"], "type": "function",
                          "function": {"name": c["function"]["name"], "arguments": args}})
        out["tool_calls"] = calls
    if m.get("tool_call_id"):
        out["tool_call_id"] = m["tool_call_id"]
    if m.get("name"):
        out["name"] = m["name"]
    return out


def main():
    env = environment()
    convs = json.load(open(os.path.join(HERE, "conversations.json")))
    out = []
    tdir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "templates")
    for name in sorted(os.listdir(tdir)):
        if not name.endswith(".jinja"):
            continue
        src = open(os.path.join(tdir, name), encoding="utf-8").read()
        try:
            tmpl = env.from_string(src)
        except jinja2.TemplateSyntaxError as e:
            print("skipping %s: %s" % (name, e), file=sys.stderr)
            continue
        for conv in convs:
            if "tools" in conv and "tools" not in src:
                continue
            for agp in (True, False):
                case = {"template": name, "conversation": conv["name"], "add_generation_prompt": agp}
                try:
                    kw = {"tools": conv["tools"]} if "tools" in conv else {}
                    case["output"] = tmpl.render(messages=[hf_message(m) for m in conv["messages"]],
                                                 add_generation_prompt=agp, bos_token=conv["bos_token"],
                                                 eos_token=conv["eos_token"], **kw)
                except TemplateError as e:
                    case["error"] = str(e)
                except Exception as e:  # a template bug jinja2 itself trips on
                    case["jinja2_failure"] = "%s: %s" % (type(e).__name__, e)
                out.append(case)
    json.dump({"generator": "python3-jinja2 %s, Hugging Face chat-template environment" % jinja2.__version__,
               "cases": out}, sys.stdout, indent=1, ensure_ascii=False)
    sys.stdout.write("\n")


main()
