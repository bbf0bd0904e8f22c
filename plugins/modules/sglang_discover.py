#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: sglang_discover
short_description: Find the SGLang server on a port, its family of processes, and capture what it runs
version_added: 0.1.0
description:
  - The server is the process listening on O(port) (from C(/proc/net/tcp) and C(/proc/net/tcp6) socket inodes).
  - Its family is the server, its descendants, and processes of its kind (titled C(sglang::), or multiprocessing
    helpers of the same interpreter) that left it, in the same process group or session, or orphaned after it
    started. Another server's processes and an operator's C(tail -f), C(less), C(vim) or C(watch) never are.
  - Reports a supervising wrapper that would start the server again (a shell loop, a script, tmux, screen).
  - Reports launchers that would start a second copy at boot, C(@reboot) crontab lines (where Debian or the RHEL
    family keeps them) and C(/etc/rc.local) or C(/etc/rc.d/rc.local) lines that start SGLang on this port
    themselves (the last C(--port), as SGLang reads it), or that run the wrapper's script as the wrapper's user
    (the script's owner). A line that only names the script, or runs it as another user, is left alone (see
    RV(launcher_notes)).
  - Captures argv (argv[0] resolved as the shell did, from the captured PATH and cwd), environment, cwd and user.
    What it returns is redacted, except RV(stored), the full capture, secrets included, when O(capture_path) is
    given. The module writes nothing - the capture is kept at O(capture_path) by the step that acts on the server,
    once its preflight passed (M(inferops.sglang.sglang_switch)'s O(inferops.sglang.sglang_switch#module:capture),
    M(inferops.sglang.sglang_adopt)'s O(inferops.sglang.sglang_adopt#module:capture)), so that a refused cutover
    leaves none.
  - Reports every system unit that could serve O(port) - its C(ExecStart), as its file and its drop-ins in C(/etc),
    C(/run), C(/usr/local/lib), C(/lib) and C(/usr/lib) leave it, runs SGLang on the port (the default port when it
    gives none), or its main process is the server - enabled, running or merely installed, and which one holds the
    port; warns when the server runs under a service other than O(unit).
  - Finds the captured command's weight files (its C(--model-path) folder, relative to its cwd, or the hub cache
    snapshot a hub id resolves to under its C(HF_HUB_CACHE), C(HF_HOME) or C(HOME)) and measures how much of them
    the page cache holds (C(mincore)), against C(MemAvailable). With O(prewarm=auto) it reads what is not resident,
    while the server still serves, so that the next start of the server loads from memory.
author: inferops.sglang maintainers (@inferops)
extends_documentation_fragment:
  - inferops.sglang.attributes
  - inferops.sglang.server.redact
  - inferops.sglang.server
options:
  capture_path:
    description:
      - Where the full capture is kept (JSON, mode 0600), read here, never written. With it, RV(stored) is the
        capture this call takes, or the one kept there when it takes none - the server runs in O(unit), is adopted
        (its capture was taken before its wrapper loop was stopped), or is not an SGLang server, or nothing listens.
    type: path
  unit:
    description: The service (name without C(.service)) that serves the port once migrated.
    type: str
  user:
    description:
      - The user the unit will run as when it is not the captured one (C(cutover_user)). With it or O(group), a
        capture that ran as root is not refused for what root would run or read (RV(refusals)); RV(caches)'
        C(environment) is for this user (default the server's own).
    type: str
    default: ""
    version_added: 0.3.0
  group:
    description: The group the unit will run as when it is not the captured one (C(cutover_group)); see O(user).
    type: str
    default: ""
    version_added: 0.3.0
  command:
    description:
      - The command the unit runs when it is made from variables alone (C(cutover_command)), its secrets masked (only
        its interpreter runs, to ask the installed version). With nothing on the port and no capture, RV(caches) are
        those of this command's server, run as O(user) (default root), so that the unit made now is the one the
        look at its own server makes on the next run.
    type: list
    elements: str
    default: []
    version_added: 0.3.0
  environment:
    description:
      - The environment of the unit made from O(command) (C(cutover_environment)). Only C(HOME) and the cache
        variables (C(SGLANG_CACHE_DIR), C(TRITON_CACHE_DIR), C(TORCHINDUCTOR_CACHE_DIR), C(FLASHINFER_WORKSPACE_BASE),
        C(TVM_FFI_CACHE_DIR), C(SGLANG_DG_CACHE_DIR), C(CUDA_CACHE_PATH)) are read. Give no others, as a module's
        arguments reach the host's log.
    type: dict
    default: {}
    version_added: 0.3.0
  prewarm:
    description:
      - V(auto) reads the weight files' pages the page cache lacks (in order, with several readers and
        C(posix_fadvise) hints), unless O(unit) serves the port already or the check mode is on; V(off) only measures.
      - V(plan) reads nothing and says whether V(auto) would have (RV(model_files)'s C(warm_due)), for
        M(inferops.sglang.model_prewarm) to read them in a call of its own, one that can run under C(async) and say
        how far it got (new in 0.3.0).
      - Never more than C(MemAvailable) minus O(prewarm_margin_gib) minus what of the files is resident already, and
        nothing after O(prewarm_budget) seconds. Its progress goes to the host's log; an error is reported in
        RV(model_files), never a failure.
    type: str
    choices: [auto, "off", plan]
    default: "off"
  prewarm_budget:
    description: Seconds the warm may take (this call waits for it).
    type: int
    default: 600
  prewarm_margin_gib:
    description: GiB of C(MemAvailable) the warm leaves to everything else.
    type: int
    default: 8
attributes:
  check_mode:
    support: full
    details: Discovers as usual (the module never writes); measures the page cache without warming it.
  diff_mode:
    support: none
  platform:
    platforms: linux
    support: full
seealso:
  - module: inferops.sglang.process_kill
"""

EXAMPLES = r"""
- name: What runs on port 30000 (no capture kept, nothing secret returned)
  inferops.sglang.sglang_discover:
    port: 30000
  register: found

- name: What runs on port 30000, with its full capture (the result's stored holds secrets, so no_log)
  inferops.sglang.sglang_discover:
    port: 30000
    capture_path: /var/lib/inferops/cutover/30000/capture.json
  register: captured
  no_log: true

- name: The captured command's length, without printing the command
  ansible.builtin.debug:
    msg: "{{ captured.stored.argv | default([]) | length }} arguments captured"
"""

RETURN = r"""
elapsed:
  description: Seconds the module took on the host.
  returned: always
  type: float
  sample: 0.21
found:
  description: Whether something listens on the port.
  returned: always
  type: bool
  sample: true
hidden:
  description: Sockets listening on the port that no process this user can inspect holds (another user's process,
    without CAP_SYS_PTRACE over it), each with its inode, its owner's uid and user, and that user's processes whose
    open files cannot be read (C(unreadable)); the port is in use.
  returned: when not found
  type: list
  elements: dict
  sample: [{inode: 81234, uid: 1001, user: alice, unreadable: [4242]}]
  version_added: 0.2.0
server:
  description: The server's main process.
  returned: when found
  type: dict
  sample: {pid: 4242, ppid: 1, pgid: 4240, user: root, state: S, comm: python, unit: null,
           cmdline: "python -m sglang.launch_server --api-key ********"}
family:
  description: Every process of the server's family.
  returned: when found
  type: list
  elements: dict
  sample: [{pid: 4250, cmdline: sglang::scheduler_TP0}]
wrapper:
  description: A supervisor that would start the server again, or null. For a shell loop, C(script) is the file
    its shell runs (never the C($0) of C(sh -c)), only when the shell's C(user) owns it; C(note) says why there
    is none (not read - binary, not UTF-8, not a regular file; another user's file).
  returned: when found
  type: dict
  sample: {pid: 4200, kind: shell loop, cmdline: "bash /home/ml/serve.sh", script: /home/ml/serve.sh, user: ml}
sglang:
  description: Whether what listens on the port runs C(sglang.launch_server).
  returned: when found
  type: bool
  sample: true
multinode:
  description:
    - The server's place in an SGLang server spread over several hosts, read from its argv (C(--nnodes) > 1,
      C(--node-rank), C(--dist-init-addr)), or null for a server of one host. C(role) is C(rank 0) (the API) or
      C(rank >= 1) (schedulers and a dummy health check only, its port answers no C(/v1/models)); C(refusal) says
      why the server is not cut over one host at a time.
  returned: when found
  type: dict
  sample: {nnodes: 2, node_rank: 1, dist_init_addr: "10.0.0.1:20000", role: "rank >= 1",
           refusal: "the server on port 30000 is rank 1 of a 2-node SGLang server (...), ..."}
  version_added: 0.2.0
disabled_launchers:
  description: Files holding boot launcher lines a cutover to O(unit) disabled (a rollback enables them again).
  returned: always
  type: list
  elements: str
  sample: [/var/spool/cron/crontabs/root]
adhoc:
  description: Whether the server on the port runs outside O(unit) (false when nothing listens).
  returned: always
  type: bool
  sample: true
adopted:
  description: The scope the server was adopted into in place (C(UNIT-adopted.scope), by M(inferops.sglang.sglang_adopt)),
    or null. The capture of an adopted server is not taken again (it was taken before its wrapper loop was stopped).
  returned: when a server listens
  type: str
  sample: sglang-30000-adopted.scope
unit_state:
  description: The ActiveState of O(unit) when it runs the server on the port, else null.
  returned: when something listens on the port
  type: str
  sample: active
launchers:
  description: Boot-time launchers of this server (path, line number, line with secrets masked).
  returned: always
  type: list
  elements: dict
  sample: [{path: /var/spool/cron/crontabs/root, lineno: 3, line: "@reboot /root/run-sglang.sh"}]
launcher_notes:
  description: Boot files skipped while looking for launchers (binary, not UTF-8, not a regular file), and why;
    and the lines left alone that name the wrapper's script but do not run it as its user (path and line number).
  returned: always
  type: list
  elements: str
  sample: ["skipped /etc/cron.d/tool is a binary file"]
  version_added: 0.2.0
url:
  description:
    - Where the server answers on this host, from its listening socket; a wildcard bind is reached on loopback, an IPv6
      one (C(--host ::), which SGLang binds to IPv6 only) on C([::1]).
  returned: when something listens on the port
  type: str
  sample: http://127.0.0.1:30000
  version_added: 0.2.0
model:
  description: The model the server serves (the first of its C(/v1/models), asked with its own C(--api-key)), or null
    when it does not answer within 5 s.
  returned: when what listens is an SGLang server
  type: str
  sample: meta-llama/Llama-3.1-70B-Instruct
running_version:
  description:
    - The SGLang version the server says it runs (the C(version) of its C(/server_info), or C(/get_server_info) on
      SGLang 0.5.5), or null when it does not answer. Nothing else of that answer is kept.
  returned: when what listens is an SGLang server
  type: str
  sample: 0.5.15
  version_added: 0.3.0
installed_version:
  description:
    - When O(unit) serves the port, or the server said no version (RV(running_version) null; a rank >= 1 of a
      multi-node server has no API to say it), the SGLang version installed where the server's command runs from
      (what a restart would run), asked of its interpreter as the server's own user with a clean environment; null
      when it was not asked (see RV(installed_note)).
  returned: when O(unit) serves the port, or the server said no version
  type: str
  sample: 0.5.23
  version_added: 0.3.0
installed_note:
  description: Why RV(installed_version) is null (no interpreter to ask; a venv of root's server that another user can
    change is never run as root), or null.
  returned: when O(unit) serves the port, or the server said no version
  type: str
  version_added: 0.3.0
upgrade:
  description:
    - SGLang upgraded under the serving O(unit) - RV(installed_version) and RV(running_version) differ (their local
      parts, C(+...), aside) - or null. The server keeps running the old version until its next restart.
  returned: when O(unit) serves the port
  type: dict
  version_added: 0.3.0
  contains:
    installed:
      description: The version installed, without its local part (C(+...)).
      type: str
    running:
      description: The version the server runs, without its local part.
      type: str
    summary:
      description: Both, in words.
      type: str
      sample: installed 0.5.23, running 0.5.15
stored:
  description:
    - With O(capture_path), the capture this call takes, else the one kept there, SECRETS INCLUDED, or an empty dict
      when there is none or O(capture_path) is not given (what a unit is made from, and what the switch keeps).
      Register the task with C(no_log) when you give O(capture_path).
  returned: always
  type: dict
  sample: {argv: [python, -m, sglang.launch_server, --api-key, sk-...], cwd: /root, user: root}
model_files:
  description:
    - The captured command's weight files (C(paths), how many C(files), their C(bytes)), how much of them the page
      cache held (C(resident)), C(MemAvailable) (C(available)), both before any warm; the warm's result or null
      (C(read) bytes, C(seconds), C(readers), C(resident_after), C(allowance), C(stopped) by C(memory) or
      C(budget), C(errors)) or why there was none (C(warm_skipped)); whether a warm is due (C(warm_due), with
      O(prewarm=plan)); and the C(summary) line. C(msg) says why no
      files were found. Null without a capture.
  returned: always
  type: dict
  sample: {model: /models/llama, path: /models/llama, files: 30, bytes: 141107412992, resident: 57853939712,
           available: 1099511627776, paths: [/models/llama/model-00001-of-00030.safetensors], errors: [], warm_due: false,
           warm: {read: 83253473280, seconds: 41.2, readers: 4, resident_before: 57853939712,
                  resident_after: 141107412992, available: 1099511627776, allowance: 1033069353984, stopped: null,
                  errors: []},
           summary: "model: 141 GB in 30 files, 41 % in the page cache, 1.1 TB available; warmed before the stop:
             83 GB read in 41.2 s (4 readers), 100 % resident after"}
units:
  description:
    - Every system unit that could serve O(port), O(unit) included - C(unit), C(path) (its file), C(dropins),
      C(files), C(exec_start) (secrets masked; null for a unit counted by its main process), C(unit_file_state),
      C(active_state), C(main_pid), C(holds_port) (the server runs in it), C(managed) (it is O(unit)), C(ours) (it is
      O(unit), written by P(inferops.sglang.systemd_unit#role)), C(fights) (enabled or running) and a C(summary) line.
  returned: always
  type: list
  elements: dict
  sample: [{unit: sglang-kimi.service, path: /etc/systemd/system/sglang-kimi.service, dropins: [],
            exec_start: "/opt/sglang/venv/bin/python -m sglang.launch_server --port 30000",
            unit_file_state: enabled, active_state: inactive, main_pid: 0, holds_port: false, managed: false,
            ours: false, fights: true,
            summary: "sglang-kimi.service (/etc/systemd/system/sglang-kimi.service, enabled, inactive)"}]
  version_added: 0.2.0
refusals:
  description:
    - Why the capture a unit would be made from (RV(stored), else the one this call took) must not be run again, by a
      unit or a rollback, each naming what it found - the process's real, effective, saved and filesystem ids differ
      (a setuid or setgid program); its argv[0] is not the program it runs (C(/proc/PID/exe)); it ran as root
      without O(user) or O(group), and another user can change what root would run or read (the executable, the
      readiness gate's python, the cwd, the paths of C(PYTHONPATH), C(LD_*), and C(PATH) before the executable's
      folder). Empty when none.
  returned: always
  type: list
  elements: str
  version_added: 0.3.0
shm:
  description:
    - The server's user's POSIX shared memory in C(/dev/shm) that SGLang names (the running version's, else every
      supported version's) - C(segments), C(bytes), how many of them a server that is gone left behind
      (C(left_behind), C(left_behind_bytes), which the unit's next start removes), the tmpfs's C(size_bytes) and
      C(free_bytes), and a C(summary) line. Null when no server was found.
  returned: always
  type: dict
  sample: {dir: /dev/shm, user: sglang, segments: 3, bytes: 49152, left_behind: 1, left_behind_bytes: 16384,
           size_bytes: 68719476736, free_bytes: 68719427584,
           summary: "3 segment(s) of sglang, 49152 bytes (1 left behind by a server that is gone, 16384 bytes); 68719427584 bytes free"}
  version_added: 0.3.0
restarts:
  description:
    - The restarts systemd made of O(unit) (C(Restart=)), as its journal keeps them (systemd's own entries only).
    - C(total); C(reasons), the unit's result before each (such as C(watchdog) for a hung server the liveness checker
      stopped vouching for, C(exit-code), C(signal)) with its count; C(last), with C(reason), C(at) in seconds since the
      epoch and C(why), the liveness checker's words for C(watchdog); and a C(summary) line.
    - Null without O(unit) or a readable journal.
  returned: always
  type: dict
  sample: {total: 1, reasons: {watchdog: 1}, last: {reason: watchdog, at: 1765000000.5,
           why: "no answer from /health_generate (HTTP 503) and no progress: its scheduler sglang::scheduler (pid 812)
                 is stopped"},
           summary: "1 restart(s) by systemd (watchdog 1); the last at 2025-12-06 05:46:40 UTC, watchdog: no answer from
                     /health_generate (HTTP 503) and no progress: its scheduler sglang::scheduler (pid 812) is stopped"}
  version_added: 0.3.0
caches:
  description:
    - The JIT and compile caches the running server uses (C(found), each with C(name), C(variable), C(path), C(set)
      (its variable was set), C(volatile) (a boot loses it), C(bytes), C(files), C(complete)), sizes read without
      following symlinks; and C(environment), the cache variables a unit of O(user) (default the server's own user) gets so that its server finds
      them after the cutover and after a boot (those the server sets itself are in its captured environment).
      With nothing on the port, those of the kept capture (the installed version asked), as its server would use
      them, so that a unit made then is the one made with the server up; without a capture, those of O(command).
      Null when there is none of them.
  returned: always
  type: dict
  sample: {found: [{name: triton, variable: TRITON_CACHE_DIR, path: /root/.triton/cache, set: false, volatile: false,
                    bytes: 10485760, files: 120, complete: true}],
           environment: {TRITON_CACHE_DIR: /root/.triton/cache, TORCHINDUCTOR_CACHE_DIR: /root/.cache/torchinductor}}
  version_added: 0.3.0
python:
  description: The Python the server's command runs on (a console script's, from its shebang); with nothing on the
    port, the kept capture's. Null when the command names none.
  returned: always
  type: str
  sample: /opt/sglang/venv/bin/python3.12
  version_added: 0.3.0
weight_cache:
  description:
    - The unit's weight cache daemon (C(UNIT-weights.service), the cutover's C(cutover_weight_cache)), when it is
      installed; else null.
    - C(active_state), C(main_pid) and C(restarts) of its unit; C(gpu_memory_mib), what its processes hold on the
      GPUs (null without C(nvidia-smi)); C(load_seconds), the weight load time SGLang logged at each start of the
      unit in its journal, oldest first (the last ten); C(mapped), whether the last start mapped its weights from the
      daemon; C(first_load_seconds), the first load in the journal (against the last, what a restart costs against a
      load from the disk).
  returned: when a server was found
  type: dict
  sample: {unit: sglang-30000-weights.service, active_state: active, main_pid: 4321, restarts: 0,
           gpu_memory_mib: 16117, load_seconds: [12.7, 0.06], mapped: true, first_load_seconds: 12.7}
  version_added: 0.3.0
capture:
  description: argv, argv0_resolved, exe, ids (real, effective, saved, filesystem uid and gid), environment, cwd, user of the server, secrets masked.
  returned: when found
  type: dict
  sample: {argv: [python, -m, sglang.launch_server], argv0_resolved: /opt/sglang/venv/bin/python, cwd: /root, user: root}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.inferops.sglang.plugins.module_utils._manager_sglang_discover import SglangDiscover
from ansible_collections.inferops.sglang.plugins.module_utils._specs import PORT_SPEC, REDACT_SPEC


def main():
    module = AnsibleModule(
        argument_spec=dict(
            PORT_SPEC,
            capture_path=dict(type="path"),
            unit=dict(type="str"),
            user=dict(type="str", default=""),
            group=dict(type="str", default=""),
            command=dict(type="list", elements="str", default=[]),
            environment=dict(type="dict", default={}),
            prewarm=dict(type="str", choices=["auto", "off", "plan"], default="off"),
            prewarm_budget=dict(type="int", default=600),
            prewarm_margin_gib=dict(type="int", default=8),
            **REDACT_SPEC
        ),
        supports_check_mode=True,
    )
    SglangDiscover(module).run()


if __name__ == "__main__":
    main()
