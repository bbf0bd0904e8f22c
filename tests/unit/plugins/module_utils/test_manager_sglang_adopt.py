"""sglang_adopt's decisions, from what is on the port and where its family is."""
from ansible_collections.inferops.sglang.plugins.module_utils._manager_sglang_adopt import decide

SCOPE = "s-adopted.scope"


def insp(owner="adhoc", problems=(), family=(10, 11, 12)):
    return {"port": 30000, "unit": "s.service", "owner": owner, "problems": list(problems),
            "server": {"pid": family[0]} if owner else None, "family": [{"pid": p} for p in family]}


def test_nothing_listens_fails():
    assert decide(insp(owner=None, family=()), {}, False, SCOPE)[0] == "fail"


def test_the_service_serves_nothing_to_do():
    assert decide(insp(owner="unit"), {}, False, SCOPE) == ("none", "s.service serves port 30000: nothing to adopt")


def test_problems_fail_before_anything():
    action, why = decide(insp(problems=["pid 9 listens on port 30000 and is not of the server's family"]),
                         {10: "session-1.scope"}, False, SCOPE)
    assert action == "fail" and why.startswith("nothing was touched: pid 9")


def test_a_server_outside_the_scope_is_adopted():
    where = {10: "session-1.scope", 11: "session-1.scope", 12: None}
    action, why = decide(insp(), where, False, SCOPE)
    assert action == "adopt" and "3 process(es)" in why


def test_kin_born_since_are_attached():
    assert decide(insp(), {10: SCOPE, 11: SCOPE, 12: "session-1.scope"}, True, SCOPE)[0] == "attach"


def test_a_lost_watcher_is_started_again():
    assert decide(insp(), {10: SCOPE, 11: SCOPE, 12: SCOPE}, False, SCOPE)[0] == "watch"


def test_adopted_and_watched_nothing_to_do():
    assert decide(insp(), {10: SCOPE, 11: SCOPE, 12: SCOPE}, True, SCOPE)[0] == "none"
