"""What a failed molecule scenario's log says of its failures, short enough for the end of a CI log.

    python3 tests/tools/scenario_failures.py LOG [LINES]

Each `fatal:`/`failed:` result of the log (on one line, or pretty-printed over several up to its closing brace) with
its message, its return code and the end of its stderr and stdout, each cut; the pytest failures (`E  `, `FAILED `)
and molecule's CRITICAL line as they are. Retries (`FAILED - RETRYING`) are noise and left out, and so is molecule's
CRITICAL line of a project with no default scenario, which opens every scenario's log (molecule goes on). At most
LINES lines (60), the last ones.
"""
import json
import re
import sys

RESULT = re.compile(r"^(fatal|failed): \[([^\]]*\](?: \(item=.*?\))?):? (?:[A-Z]+! )?=> (.*)$")
KEEP = re.compile(r"^(E  |FAILED (?!- RETRYING)|CRITICAL (?!'molecule/default/molecule.yml' glob failed))")
WIDTH = 400


def cut(text, size):
    text = text.strip()
    return text if len(text) <= size else "..." + text[-size:]


def described(kind, host, body):
    """A result's lines: what failed on which host, its message, rc, and its outputs' ends."""
    try:
        result = json.loads(body)
    except ValueError:
        return ["%s: [%s: %s" % (kind, host, cut(body, WIDTH))]
    if not isinstance(result, dict):
        return ["%s: [%s: %s" % (kind, host, cut(body, WIDTH))]
    lines = ["%s: [%s: %s" % (kind, host, cut(str(result.get("msg", "")), WIDTH))]
    for key in ("rc", "assertion", "item"):
        if key in result:
            lines.append("    %s: %s" % (key, cut(json.dumps(result[key]), 200)))
    for key in ("stderr", "stdout"):
        if result.get(key):
            lines.extend("    %s| %s" % (key, line) for line in cut(result[key], 1200).splitlines()[-12:])
    return lines


def failures(log):
    out, lines, i = [], log.splitlines(), 0
    while i < len(lines):
        line = re.sub(r"\x1b\[[0-9;]*m", "", lines[i])
        found = RESULT.match(line)
        if found:
            kind, host, body = found.groups()
            if body.strip() == "{":  # pretty-printed: up to the closing brace at the start of a line
                end = i + 1
                while end < len(lines) and lines[end].rstrip() != "}":
                    end += 1
                body = "\n".join(["{"] + lines[i + 1:end + 1])
                i = end
            out.extend(described(kind, host, body))
        elif KEEP.match(line):
            out.append(line[:WIDTH])
        i += 1
    return out


def main(argv):
    with open(argv[1], errors="replace") as f:
        found = failures(f.read())
    for line in found[-(int(argv[2]) if len(argv) > 2 else 60):]:
        print(line)


if __name__ == "__main__":
    main(sys.argv)
