"""Every failure message the modules and roles can print, as the fixed text between its placeholders: what
tests/unit/test_docs_troubleshooting.py finds in docs/troubleshooting.md.

Where they are:
- plugins/: the message given to fail(), failed() or fail_json(msg=) of a module's manager or mechanism, and a
  preflight problem (`...problems.append(...)`), and the first argument of a raised exception (`raise
  NAME(...)`, shown through fail(str(e)); a re-raise or a bare raise has no text of its own): a string literal, a
  %-format of one, or literals joined with +;
- roles/: an assert's fail_msg and an ansible.builtin.fail's msg.
A placeholder (%s, %d, %r, %.1f ... in Python; {{ ... }} and {% ... %} in a task) stands for what the run found,
and is cut out; the quoted strings inside a task's {{ ... }} are fixed parts of their own (the message says one of
them), and a message that is only {{ name }} of one of the task's vars is that var's text. A message that is nothing
but a placeholder (an exception's text or another task's message passed on) is left out: the page lists it where it
is made. Whitespace runs count as one space. Each fixed part of at least MIN characters must appear as is in the
page."""
import ast
import re

import yaml

from tests.tools.role_readme import ROOT

PAGE = ROOT / "docs" / "troubleshooting.md"
MIN = 12
HOLE = "\0"
PY_FORMAT = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(?:\d+|\*)?(?:\.\d+)?[sdirfgxeEGc%]")
JINJA = re.compile(r"\{\{.*?\}\}|\{%.*?%\}", re.S)
QUOTED = re.compile(r"'((?:[^'\\]|\\.)*)'")
ONLY_VAR = re.compile(r"^\s*\{\{\s*(\w+)\s*\}\}\s*$")


def _literal(node):
    """The fixed text of a message expression, placeholders as HOLE; None when it is no literal at all."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return PY_FORMAT.sub(lambda m: "%" if m.group(0) == "%%" else HOLE, node.value)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
        return _literal(node.left)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _literal(node.left), _literal(node.right)
        if left is None and right is None:
            return None
        return (left if left is not None else HOLE) + (right if right is not None else HOLE)
    return None


def _python(path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and node.exc.args:
            text = _literal(node.exc.args[0])
            if text is not None:
                yield "%s:%d" % (path.relative_to(ROOT), node.lineno), text
            continue
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        name, owner = node.func.attr, node.func.value
        args = node.args[:1] if name in ("fail", "failed") else []
        args += [k.value for k in node.keywords if name == "fail_json" and k.arg == "msg"]
        problems = isinstance(owner, ast.Name) and owner.id.endswith("problems") or (
            isinstance(owner, ast.Subscript) and "problems" in ast.dump(owner.slice))
        if name == "append" and problems:
            args = node.args[:1]
        for arg in args:
            text = _literal(arg)
            if text is not None:
                yield "%s:%d" % (path.relative_to(ROOT), node.lineno), text


def _tasks(items):
    for t in items or []:
        if isinstance(t, dict):
            yield t
            for key in ("block", "rescue", "always"):
                yield from _tasks(t.get(key))


def _set_facts(role):
    """{name: text} of every fact the role's tasks set (a message given as one such fact is that fact's text)."""
    facts = {}
    for path in sorted((role / "tasks").glob("**/*.yml")):
        for task in _tasks(yaml.safe_load(path.read_text())):
            for key in ("set_fact", "ansible.builtin.set_fact"):
                for name, text in (task.get(key) or {}).items():
                    if isinstance(text, str):
                        facts[name] = text
    return facts


def _role(path):
    facts = _set_facts(path.parents[len(path.relative_to(ROOT).parts) - 3])  # roles/NAME/tasks/...
    for task in _tasks(yaml.safe_load(path.read_text())):
        for key, value in task.items():
            msg = None
            if key in ("assert", "ansible.builtin.assert") and isinstance(value, dict):
                msg = value.get("fail_msg")
            elif key in ("fail", "ansible.builtin.fail") and isinstance(value, dict):
                msg = value.get("msg")
            if not isinstance(msg, str):
                continue
            only = ONLY_VAR.match(msg)
            if only and only.group(1) in (task.get("vars") or {}):
                msg = task["vars"][only.group(1)]
            elif only and only.group(1) in facts:
                msg = facts[only.group(1)]
            quoted = [q for e in JINJA.findall(msg) for q in QUOTED.findall(e)]
            yield "%s (%s)" % (path.relative_to(ROOT), task.get("name")), HOLE.join([JINJA.sub(HOLE, msg)] + quoted)


def messages():
    """[(where, [fixed part, ...])] for every failure message in plugins/ and roles/."""
    out = []
    found = [m for p in sorted((ROOT / "plugins").rglob("*.py")) for m in _python(p)]
    found += [m for p in sorted((ROOT / "roles").glob("*/tasks/**/*.yml")) for m in _role(p)]
    for where, text in found:
        parts = [" ".join(p.split()) for p in text.split(HOLE)]
        parts = [p for p in parts if len(p) >= MIN]
        out.append((where, parts))
    return out


def normalised(text):
    return " ".join(text.split())
