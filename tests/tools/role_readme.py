"""Generates each role's README.md from its meta/argument_specs.yml (make readmes).

tests/unit/test_roles.py fails when a README is not what this would write.
"""
import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def _text(x):
    text = " ".join(x) if isinstance(x, list) else str(x or "")
    # ansible-doc's markup: C() V() O() RV() E() P() M() I() as code (P(FQCN#type) as the FQCN), L(text,url) and
    # U(url) as links
    text = re.sub(r"\bL\(([^,)]*),\s*([^)]*)\)", r"[\1](\2)", text)
    text = re.sub(r"\bU\(([^)]*)\)", r"<\1>", text)
    return re.sub(r"\b(?:RV|[CVOIPEM])\(([^)#]*)(?:#[a-z_]+)?\)", r"`\1`", text)


def _default(opt):
    if "default" not in opt:
        return ""
    return "`%s`" % yaml.safe_dump(opt["default"], default_flow_style=True, width=1000).strip().replace("\n...", "")


def render(role):
    specs = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())["argument_specs"]
    spec = specs["main"]
    lines = ["# inferops.sglang.%s" % role.name, "", spec["short_description"], ""]
    for para in spec.get("description", []):
        lines += [_text(para), ""]
    lines += ["Generated from `meta/argument_specs.yml` by `make readmes`; do not edit by hand.", "",
              "| variable | type | default | description |", "| --- | --- | --- | --- |"]
    for name, opt in spec["options"].items():
        kind = opt.get("type", "str") + ("/" + opt["elements"] if "elements" in opt else "")
        default = "**required**" if opt.get("required") else _default(opt)
        desc = _text(opt.get("description")).replace("|", "\\|")
        if "choices" in opt:
            desc += " Choices: %s." % ", ".join("`%s`" % c for c in opt["choices"])
        lines.append("| `%s` | %s | %s | %s |" % (name, kind, default.replace("|", "\\|"), desc))
    lines += ["", "Example:", "", "```yaml", "- name: Apply %s" % role.name, "  ansible.builtin.include_role:",
              "    name: inferops.sglang.%s" % role.name]
    required = [n for n, o in spec["options"].items() if o.get("required")]
    if required:
        lines.append("  vars:")
        lines += ["    %s: ...  # required" % n for n in required]
    lines += ["```", ""]
    for name, entry in specs.items():
        if name == "main":
            continue
        lines += ["## Entry point `%s`" % name, "", entry["short_description"], ""]
        for para in entry.get("description", []):
            lines += [_text(para), ""]
        left_out = [n for n in spec["options"] if n not in entry.get("options", {})]
        added = [n for n in entry.get("options", {}) if n not in spec["options"]]
        assert not added, "%s: options of %s that main lacks: %s" % (role.name, name, added)
        lines += ["Variables: those above%s." % (", but %s" % ", ".join("`%s`" % n for n in left_out) if left_out else ""),
                  "", "```yaml", "- name: %s" % entry["short_description"].rstrip("."),
                  "  ansible.builtin.include_role:", "    name: inferops.sglang.%s" % role.name,
                  "    tasks_from: %s" % name, "```", ""]
    return "\n".join(lines)


def roles():
    return sorted(p for p in (ROOT / "roles").iterdir() if (p / "meta" / "argument_specs.yml").exists())


if __name__ == "__main__":
    for r in roles():
        (r / "README.md").write_text(render(r))
        print("wrote", r / "README.md", file=sys.stderr)
