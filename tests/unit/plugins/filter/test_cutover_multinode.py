"""A multi-node server's group (plugins/filter/cutover_multinode.py): a host's rank, whether its ranks make one server,
what failed on its ranks, the group's part of each rank's record, and the one mapping the group stage's filter gives
of them. (The group's inputs: test_cutover_inputs.py.)"""
import pytest

from ansible_collections.inferops.sglang.plugins.filter.cutover_multinode import (
    cutover_group, group_failures, group_problems, group_record, group_units, rank_of)

ARGS = ["-m", "sglang.launch_server", "--model-path", "/m", "--tp", "16", "--nnodes", "2", "--dist-init-addr",
        "10.0.0.1:20000", "--port", "30000"]


def argv(rank, python="/opt/sglang/venv/bin/python", *extra):
    return [python] + ARGS + ["--node-rank", str(rank)] + list(extra)


def member(host, rank, *extra, **kw):
    return {"host": host, "rank": rank_of(argv(rank, *extra, **kw))}


def test_a_rank_and_the_digest_of_its_command_apart_from_the_rank_and_the_interpreter():
    r0, r1 = rank_of(argv(0)), rank_of(argv(1, "/home/ops/venv/bin/python"))
    assert (r0["nnodes"], r0["node_rank"], r0["dist_init_addr"], r0["role"]) == (2, 0, "10.0.0.1:20000", "rank 0")
    assert r1["node_rank"] == 1 and r1["role"] == "rank >= 1"
    assert r0["same"] == r1["same"], "the same server's arguments on two hosts, each with its own venv"
    assert rank_of(["/p"] + ARGS[:-2] + ["--node-rank=1", "--port", "30000"])["same"] == r0["same"]
    assert rank_of(argv(0, "/opt/sglang/venv/bin/python", "--context-length", "8192"))["same"] != r0["same"]
    assert rank_of(["/p", "-m", "sglang.launch_server", "--tp", "8"]) is None


@pytest.mark.parametrize("members, says", [
    ([member("a", 0), member("b", 1)], []),
    ([member("a", 0), None], ["b: no plan (its discovery or its plan failed, or it is not in this run)",
                              "rank 1 of 2 is on no host of the group: a rank missing"]),
    ([member("a", 0), member("b", 0)], ["rank 0 is on a and b: each rank once", "rank 1 of 2 is on no host"]),
    ([member("a", 0), {"host": "b", "rank": None}],
     ["b: its server is not one rank of a multi-node server", "rank 1 of 2 is on no host"]),
    ([member("a", 0), member("b", 1, "/opt/sglang/venv/bin/python", "--mem-fraction-static", "0.8")],
     ["the ranks' commands differ apart from --node-rank: a (rank 0) runs one | b (rank 1) runs one"]),
    ([member("a", 0), member("b", 1), None], ["c: no plan", "a: --nnodes 2, but the inventory group kimi has 3 hosts",
                                              "b: --nnodes 2, but the inventory group kimi has 3 hosts",
                                              "rank 2 of 3 is on no host"]),
])
def test_the_ranks_make_one_server_or_each_problem_is_named(members, says):
    hosts = ["a", "b", "c"][:len(members)]
    got = group_problems(members, hosts, "kimi")
    assert len(got) == len(says) and all(g.startswith(s) for g, s in zip(got, says)), got


MEMBERS = [member("a", 0), member("b", 1)]


def test_what_failed_on_the_ranks():
    assert group_failures([{"changed": True}, {"changed": False}], MEMBERS) == []
    assert group_failures([{"failed": True, "msg": "preflight failed, nothing was touched: x"},
                          {"skipped": True}], MEMBERS) == [
        "a (rank 0): preflight failed, nothing was touched: x", "b (rank 1): did not run it"]
    assert group_failures([None, {}], MEMBERS) == ["a (rank 0): did not run it", "b (rank 1): did not run it"]


def show(**props):
    return {"stdout": "\n".join("%s=%s" % kv for kv in props.items()), "rc": 0}


def test_every_other_rank_s_unit_runs_never_restarted():
    assert group_units([None, show(ActiveState="active", SubState="running", NRestarts=0)], MEMBERS) == []
    assert group_units([None, show(ActiveState="activating", SubState="auto-restart", NRestarts=1)], MEMBERS) \
        == ["b (rank 1): its unit is activating (auto-restart), restarted 1 times"]
    assert group_units([show(ActiveState="failed"), {"skipped": True}], MEMBERS) == [
        "b (rank 1): its unit was not looked at"], "rank 0 is not asked: its wait said"


def test_the_group_s_part_of_a_rank_s_record():
    stops = [{"msg": "stop: stop server 0.4 s", "outcome": {"seconds": 0.6, "stop_began_at": 1796400000.5}},
             {"msg": "nothing to switch", "changed": True}]
    assert group_record(stops, MEMBERS, "kimi", 1) == {
        "name": "kimi", "nnodes": 2, "rank": 1, "leader": "a", "stop_began_at": 1796400000.5,
        "ranks": [{"host": "a", "rank": 0, "stop": "stop: stop server 0.4 s", "seconds": 0.6},
                  {"host": "b", "rank": 1, "stop": "nothing to switch", "seconds": None}]}


def test_the_group_stage_s_mapping_has_the_keys_of_the_steps_given():
    stops = [{"msg": "m", "outcome": {"seconds": 0.6, "stop_began_at": 1.5}}, {"failed": True, "msg": "no"}]
    assert cutover_group([member("a", 0), None], "kimi", hosts=["a", "b"]) == {
        "problems": group_problems([member("a", 0), None], ["a", "b"], "kimi")}
    assert cutover_group(MEMBERS, "kimi", preflight=[None, {}]) == {
        "refused": ["a (rank 0): did not run it", "b (rank 1): did not run it"]}
    assert cutover_group(MEMBERS, "kimi", 0, stop=stops) == {
        "stop_failures": ["b (rank 1): no"], "stop_began": True, "record": group_record(stops, MEMBERS, "kimi", 0)}
    assert cutover_group(MEMBERS, "kimi", stop=[{"failed": True, "msg": "refused"}, None]) == {
        "stop_failures": ["a (rank 0): refused", "b (rank 1): did not run it"], "stop_began": False}
    assert cutover_group(MEMBERS, "kimi", start=[{"changed": True}, {"failed": True, "msg": "x"}],
                         unit=[None, show(ActiveState="failed", SubState="failed", NRestarts=0)]) == {
        "failures": ["b (rank 1): x", "b (rank 1): its unit is failed (failed), restarted 0 times"]}
    assert cutover_group(MEMBERS, "kimi") == {}
