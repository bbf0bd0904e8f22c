"""The record reference's fields (docs/record.md) and the fields a record holds: what tests/unit/test_docs_record.py
checks against the record's writers, and molecule/cutover's verify against the records a run wrote.

docs/record.md has one table per kind of record, after a `<!-- fields: KIND -->` line (cutover, adopt, rollback):
a row a field, its name in backticks in the first cell. A nested field is dotted (`old.pid`), a field of a list's
items has `[]` (`steps[].step`). A field documented with none of its own fields documented is taken whole (a map
of names, such as `patches`); once one of its fields is documented, each must be."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "record.md"
MARK = re.compile(r"^<!-- fields: (\w+) -->$")
ROW = re.compile(r"^\|\s*`([^`]+)`\s*\|")


def documented(text=None):
    """{kind: [field, ...]} as the tables of docs/record.md (or `text`) list them."""
    out, kind, rows = {}, None, False
    for line in (DOC.read_text() if text is None else text).splitlines():
        mark = MARK.match(line.strip())
        if mark:
            kind, rows = mark.group(1), False
            out[kind] = []
        elif kind and line.startswith("|"):
            rows = True
            row = ROW.match(line)
            if row:
                out[kind].append(row.group(1))
        elif kind and rows:  # the table ended
            kind = None
    return out


def paths(record, prefix=""):
    """Every field of a record (a dict), nested ones too, named as the reference names them."""
    out = set()
    for key, value in record.items():
        name = prefix + key
        out.add(name)
        if isinstance(value, dict):
            out |= paths(value, name + ".")
        elif isinstance(value, list):
            for item in value:
                if isinstance(item, dict):
                    out |= paths(item, name + "[].")
    return out


def _parents(name):
    """The fields a field is in: old.family -> old; units[].changed -> units."""
    parts = re.split(r"(?:\[\])?\.", name)
    seps = re.findall(r"(?:\[\])?\.", name)
    return ["".join(p + s for p, s in zip(parts[:i], seps[:i]))[:-len(seps[i - 1])] for i in range(1, len(parts))]


def undocumented(record, fields):
    """The record's fields the reference's `fields` do not cover, sorted."""
    fields = set(fields)
    whole = set(f for f in fields if not any(g.startswith((f + ".", f + "[].")) for g in fields))
    return sorted(p for p in paths(record) if p not in fields and not any(a in whole for a in _parents(p)))
