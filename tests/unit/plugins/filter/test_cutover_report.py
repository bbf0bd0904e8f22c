"""What the cutover role says: the plan from the switch's checks, the throughput gate's table, and the record stage's
summary for each way a run ends (a record kept by the record stage or by the switch, nothing to switch, check mode,
an adoption)."""
from ansible_collections.inferops.sglang.plugins.filter.cutover_report import (
    cutover_bench_gate, cutover_plan_lines, cutover_summary)


def test_the_plan_names_the_gpus_the_protected_the_strays_and_each_unit():
    preflight = {"gpus": [0, 1], "protected": [{"cmdline": "nvidia-persistenced"}],
                 "strays": [{"cmdline": "python train.py"}]}
    checks = {"msg": "would switch port 30000", "preflight": preflight,
              "units": [{"plan": "old.service: disabled, stopped", "changed": ["ExecStart"]}, {"plan": "b.service: kept"}]}
    assert cutover_plan_lines(checks, True) == [
        "would switch port 30000", "GPUs of the server: [0, 1]", "protected, never touched: ['nvidia-persistenced']",
        "strays (released: True): ['python train.py']",
        "other units that could serve the port, and what the switch does to each: ",
        "old.service: disabled, stopped", "b.service: kept", "what changes in it: ExecStart"]
    assert cutover_plan_lines({"msg": "m", "preflight": {}})[-1].endswith("to each: none")


def test_the_gate_compares_each_concurrency_and_names_the_slower():
    gate = cutover_bench_gate({"1": {"output_throughput": 100.0}, "10": {"output_throughput": 800.0}},
                              {"1": {"output_throughput": 95.0}, "10": {"output_throughput": 600.0}}, 10)
    assert gate["table"] == [{"concurrency": 1, "baseline": 100.0, "service": 95.0, "change_pct": -5.0},
                             {"concurrency": 10, "baseline": 800.0, "service": 600.0, "change_pct": -25.0}]
    assert [r["concurrency"] for r in gate["slower"]] == [10]
    assert gate["says"] == ("the service is slower than the old server at concurrency [10] (output tok/s, baseline -> "
                            "service): C=1 100.0 -> 95.0 (-5.0 %); C=10 800.0 -> 600.0 (-25.0 %); allowed -10 %")
    assert cutover_bench_gate({"1": {"output_throughput": 10.0}}, {"1": {"output_throughput": 9.5}}, 10)["slower"] == []


def test_the_summary_for_each_way_a_run_ends():
    switched = {"plan": ["the plan"], "report": "# Cutover\nready after 5 s", "says": "unused"}
    assert cutover_summary(switched) == ["the plan", "# Cutover", "ready after 5 s"]
    assert cutover_summary(switched, "# Cutover\nwith the gate") == ["the plan", "# Cutover", "with the gate"]
    assert cutover_summary({"plan": [], "report": None, "says": "sglang.service serves port 1: nothing to switch"}) == [
        "sglang.service serves port 1: nothing to switch"]
    assert cutover_summary({"plan": [], "report": None, "says": "check mode: nothing was changed. adopted"}, None) == [
        "check mode: nothing was changed. adopted"]


def test_progress_says_the_phase_the_seconds_and_the_log_with_the_key_masked():
    from ansible_collections.inferops.sglang.plugins.filter.cutover_report import cutover_progress
    assert cutover_progress({}, 3.2) == "stopping, 3 s"
    assert cutover_progress({"steps": [{"step": "stop server"}]}, 12, "old log") == "stopping (stop server done), 12 s"
    started = {"steps": [{"step": "start unit"}], "started_at": 1.0}
    assert cutover_progress(started, 40, "a\nLoad weight begin. avail mem=70 GB") == (
        "loading, 40 s: Load weight begin. avail mem=70 GB")
    assert cutover_progress(started, 60, "Capture cuda graph begin.").startswith("loading, 60 s")
    assert cutover_progress(started, 70, "Uvicorn running on http://127.0.0.1:30000").startswith("warm-up, 70 s")
    assert cutover_progress(started, 95, "The server is fired up and ready to roll!").startswith("verifying, 95 s")
    assert cutover_progress(started, 41, "server_args=ServerArgs(api_key='sk-1')", ["sk-1", None]) == (
        "loading, 41 s: server_args=ServerArgs(api_key='********')")


def test_progress_masks_every_secret_of_the_servers_args_line_not_only_the_key_given():
    """0.5.15 logs its server_args at start: the admin key, a token, a password are masked though no value was given."""
    from ansible_collections.inferops.sglang.plugins.filter.cutover_report import cutover_progress
    started = {"steps": [{"step": "start unit"}], "started_at": 1.0}
    line = ("server_args=ServerArgs(model_path='/m', api_key='sk 1', admin_api_key='adm-2', hf_token=\"hf_3\", "
            "ssl_keyfile_password='pw4', port=30000) DB_PASS=x5 --token t6")
    said = cutover_progress(started, 41, line, [])
    assert said == ("loading, 41 s: server_args=ServerArgs(model_path='/m', api_key='********', admin_api_key='********', "
                    "hf_token=\"********\", ssl_keyfile_password='********', port=30000) DB_PASS=******** --token ********")


def test_prewarm_progress_says_the_seconds_and_what_was_read_of_what_is_planned():
    from ansible_collections.inferops.sglang.plugins.filter.cutover_report import cutover_prewarm_progress
    assert cutover_prewarm_progress("", 2.5) == "warming the page cache, 2 s: starting"
    text = '{"planned": 60000000000, "read": 1000, "seconds": 5.0}\n{"planned": 60000000000, "read": 14200000000}\n'
    assert cutover_prewarm_progress(text, 45.9) == "warming the page cache, 45 s: 14 GB of 60 GB read"
    assert cutover_prewarm_progress(text + '{"planned": 6', 46) == "warming the page cache, 46 s: 14 GB of 60 GB read"
    assert cutover_prewarm_progress('{"planned": "x"}\n', 7) == "warming the page cache, 7 s: starting"
