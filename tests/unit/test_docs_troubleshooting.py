"""docs/troubleshooting.md holds every failure message of the modules and roles (the fixed text of each, as
tests/tools/failure_messages.py finds it in the code)."""
import ast

from tests.tools import failure_messages as fm


def missing(page):
    text = fm.normalised(page)
    return ["%s: %r" % (where, part) for where, parts in fm.messages() for part in parts if part not in text]


def test_every_failure_message_is_on_the_page():
    assert missing(fm.PAGE.read_text()) == []


def test_the_scan_finds_the_messages_of_modules_and_roles():
    found = fm.messages()
    wheres = [w for w, parts in found if parts]
    assert len(wheres) > 50
    assert any(w.startswith("plugins/module_utils/_switch/preflight.py") for w in wheres)  # the preflight's problems
    assert any(w.startswith("plugins/module_utils/_manager_sglang_switch.py") for w in wheres)
    assert any(w.startswith("roles/cutover/tasks/main.yml") for w in wheres)
    assert any(w.startswith("roles/sglang_patches/") for w in wheres)  # a role's beside the cutover's
    assert any(w.startswith("plugins/module_utils/_server/readiness.py") for w in wheres)  # raised, then fail(str(e))
    assert any(w.startswith("plugins/module_utils/_host/selection.py") for w in wheres)


def test_a_raised_message_is_scanned_and_a_re_raise_is_not(tmp_path, monkeypatch):
    monkeypatch.setattr(fm, "ROOT", tmp_path)
    source = tmp_path / "m.py"
    source.write_text('def f(e, u, t):\n'
                      '    raise NotReady("the server at %s was not ready within %d s" % (u, t))\n'
                      '    raise\n'
                      '    raise e\n'
                      '    raise RuntimeError(str(e))\n'
                      '    raise ValueError("bad: " + str(e))\n')
    ready = "the server at " + fm.HOLE + " was not ready within " + fm.HOLE + " s"
    assert list(fm._python(source)) == [("m.py:2", ready), ("m.py:6", "bad: " + fm.HOLE)]


def test_a_raised_message_left_off_the_page_is_named():
    gone = fm.PAGE.read_text().replace("was not ready within", "did not come up within")
    assert [m.split(":", 1)[0] + m[m.index(": "):] for m in missing(gone)] == [
        "plugins/module_utils/_server/readiness.py: 'was not ready within'"]


def test_a_message_left_off_the_page_is_named():
    page = fm.PAGE.read_text()
    gone = page.replace("Run playbooks/rollback.yml to go back to the captured command.", "")
    assert missing(gone) == ["roles/cutover/tasks/main.yml (Rollback - say what happened): "
                             "'Run playbooks/rollback.yml to go back to the captured command.'"]
    assert missing(page.replace("is not of the server's family", "is not in the family"))


def test_placeholders_are_cut_out_and_literals_joined():
    call = ast.parse('self.fail("patch %s is for sglang %s; the installed %%s version is %.1f" % (a, b, c))').body[0]
    assert fm._literal(call.value.args[0]).split(fm.HOLE) == ["patch ", " is for sglang ",
                                                              "; the installed %s version is ", ""]
    joined = ast.parse('x.failed("preflight failed, nothing was touched: " + " | ".join(p), r)').body[0]
    assert fm._literal(joined.value.args[0]) == "preflight failed, nothing was touched: " + fm.HOLE
    assert fm._literal(ast.parse("self.fail(str(e))").body[0].value.args[0]) is None
