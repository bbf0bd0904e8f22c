"""The test bed: a real systemd, and the SGLang double's tree and start-up phases inside it."""
import json
import shlex
import time

# Runs inside the container: polls the port and the endpoints every 0.1 s until /health is 200,
# and prints what it saw, phase by phase.
OBSERVE = r'''
import json, time, urllib.request, urllib.error
def get(path):
    try:
        with urllib.request.urlopen("http://127.0.0.1:30000" + path, timeout=30) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except urllib.error.URLError:
        return 0
seen = []
deadline = time.time() + 120
while time.time() < deadline:
    obs = (get("/v1/models"), get("/health"))
    if not seen or seen[-1] != obs:
        seen.append(obs)
    if obs[1] == 200:
        break
    time.sleep(0.1)
print(json.dumps(seen))
'''


def test_systemd_is_pid_1_and_running(host):
    assert host.file("/proc/1/comm").content_string.strip() == "systemd"
    state = host.run("systemctl is-system-running").stdout.strip()
    assert state in ("running", "degraded"), state


def test_reached_over_ssh(host):
    assert host.ansible.get_variables()["ansible_connection"] == "ssh"
    assert host.run("echo $SSH_CONNECTION").stdout.strip().endswith(" 22"), "commands arrive through sshd"


def test_double_tree_like_the_real_server(host):
    mains = host.process.filter(comm="python")
    main = [p for p in mains if "sglang.launch_server" in p.args]
    assert len(main) == 1, [p.args for p in mains]
    main = main[0]
    assert main.args.startswith("/opt/sglang/venv/bin/python -m sglang.launch_server --model-path /models/tiny-llama --tp 2")
    titles = ("sglang::scheduler_TP0", "sglang::scheduler_TP1", "sglang::detokenizer")
    # a spawned child carries multiprocessing's command line until it titles itself, as the real server's do: the
    # tree is looked at once its children have started (the server is still loading: its port opens 20 s after launch)
    deadline = time.monotonic() + 15
    while True:
        kids = {p.args: p for p in host.process.filter(ppid=main.pid)}
        if all(t in kids for t in titles) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    for title in titles:
        assert title in kids, sorted(kids)
        assert kids[title].pgid == main.pgid
        assert host.file("/proc/%d/comm" % kids[title].pid).content_string.strip() == title[:15]
    held = host.run("ls -l /proc/%d/fd" % kids["sglang::scheduler_TP1"].pid).stdout
    assert "/dev/nvidia1" in held and "/dev/nvidiactl" in held and "/dev/nvidia0" not in held


def test_port_closed_while_loading_then_warmup_then_ready(host):
    seen = json.loads(host.check_output("python3 -c %s" % shlex.quote(OBSERVE)))
    # (/v1/models, /health): refused while loading, (200, 503) in warm-up, (200, 200) ready
    assert seen[0] == [0, 0], seen
    assert [200, 503] in seen, seen
    assert seen[-1] == [200, 200], seen
    assert "The server is fired up and ready to roll!" in host.file("/root/sglang.log").content_string
