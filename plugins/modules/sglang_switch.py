#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: sglang_switch
short_description: Switch the server on a port to its systemd unit in one detached, locked, host-side step
version_added: 0.1.0
description:
  - B(Preflight), always, before anything is stopped (alone in check mode). What listens on O(port) is an SGLang
    server; no process outside its family listens there; no process outside its family holds its GPUs, unless
    O(release_strays); O(executable) exists and finds the C(sglang) package; the unit is installed; where SELinux
    is enforcing, O(executable) has a type systemd runs (else its folder is labelled C(bin_t) with C(semanage
    fcontext) and C(restorecon) when they are there, no other user than root can change where O(executable) leads,
    and the preflight found nothing else; otherwise the module fails saying what to run).
    Protected daemons (C(nvidia-persistenced) and the like) are listed and never touched.
  - The preflight also finds every system unit that could serve O(port) - its C(ExecStart), as its file and its
    drop-ins in C(/etc), C(/run), C(/usr/local/lib), C(/lib) and C(/usr/lib) leave it, runs SGLang on the port (the
    default port when it gives none), or its main process is the server - whether it is enabled, running or merely
    installed. With O(existing_units=replace) each one that is enabled or running is taken over once the preflight
    passed - its file and drop-ins backed up into the port's state folder (C(units/), listed in C(units.json)), the
    unit disabled, and stopped (by the switch itself when it runs the server); one that is neither is left as it is.
    O(existing_units=refuse) fails the preflight, listing them. A file of O(unit)'s own name that the operator wrote is
    backed up before the unit replaces it, and RV(units) says what changes in it. A rollback (O(target=capture)) puts
    every unit taken over back as it was, enabled again where it was, and starts the one that ran the server.
  - Nothing is written, installed or enabled before the preflight passed, free space included - the state folder
    and the unit's folders writable, with room for what goes there; a refused switch changes nothing and reports
    C(changed=false).
  - B(Switch), as one process on the host, detached from the controller (a transient systemd unit started with
    C(systemd-run); a new session where systemd is not PID 1) and holding a lock (one switch per port). It stops a
    wrapper loop that would respawn the server; stop the family in mixed mode (SIGTERM to the server so it drains,
    for up to O(drain) seconds, then SIGKILL to all that is left); verify that none is left and the port is free;
    stop what still holds the server's GPUs (the family's leftovers, strays when allowed) and wait for
    C(nvidia-smi) to show their memory back where it exists; start the unit without blocking.
    A dropped connection or a cancelled job does not stop it half-way.
  - The module waits for that process and returns each step's timing. One switch per port - a run claims it under
    the lock, with a plan of its own; a run that finds a switch of the port in progress, or one finished since it
    began, waits for it and returns its outcome as its own (failing when it failed).
  - With O(wait), the module then waits for what it started (the unit, or the captured command) until it serves -
    ready, its model named by C(/v1/models) (O(wait.model) when given), and one generation with O(wait.generate).
    It fails fast when the unit fails or restarts, or the captured command exits, quoting the end of its log, and
    the failure says RV(wait_failed) - the switch itself completed.
  - With O(record), once the server serves, the record of the switch (O(record.data) completed with the steps, the
    downtime, the load time, the model, the preflight's family and GPUs, the stage times) is written to the port's
    state folder O(state_dir)/PORT/ as C(last.json), C(history/YYYYmmddTHHMMSSZ-KIND.json) and C(last.md) (mode
    0640, the folders 0700), the newest O(record.history) records kept in C(history/); the same files as
    M(inferops.sglang.cutover_record) writes. The record is the host's switch's - whichever run reports
    the switch first keeps it (the run that switched, one that joined it, or a rerun after the controller was
    interrupted, which finds the switch finished without its record and keeps it with the switch's own timings).
  - With O(install), the unit, its environment file and its readiness gate are compared and verified first (with
    C(systemd-analyze verify) when the unit changed - a rejected unit fails the module with nothing written and
    nothing stopped), then, once the preflight passed, put in place as M(inferops.sglang.sglang_unit) does (written
    when they differ, enabled, the daemon reloaded); in check mode they are only compared (diff mode shows them, the
    environment masked, and what the switch does to each unit that could serve the port). When the unit serves the
    port and what it runs changed, the switch restarts it as with O(restart).
  - When the unit already serves the port, nothing happens unless O(restart) (the cutover sets it when the unit,
    its environment or the venv changed), the unit is stopped (its own drain budget) and started again the same way.
author: inferops.sglang maintainers (@inferops)
extends_documentation_fragment:
  - inferops.sglang.attributes
  - inferops.sglang.server.redact
  - inferops.sglang.server
  - inferops.sglang.server.devices
  - inferops.sglang.server.handover
  - inferops.sglang.unit_files.suboptions
  - inferops.sglang.wait.suboptions
options:
  unit:
    description: The service to switch to (name without C(.service)); it must be installed, except in check mode.
    type: str
    required: true
  state_dir:
    description: The switch's plan and outcome go to O(state_dir)/PORT/ (mode 0700; files 0600).
    type: path
    default: /var/lib/inferops/cutover
  drain:
    description: Seconds the server may take to drain its in-flight requests after SIGTERM before SIGKILL.
    type: float
    default: 120
  release_strays:
    description:
      - Stop processes outside the family that hold the server's GPUs, instead of failing preflight - only those of
        the server's own user (real uid), or of a user in O(release_users), that serve on no port. Another user's
        job, and a process that serves (another SGLang server and its family are neighbours, never strays), are
        never stopped.
      - The server's GPUs are those O(gpus) names, else the ones its arguments place it on (C(--base-gpu-id),
        C(--gpu-id-step), the C(--tp)/C(--dp)/C(--pp) sizes, this node's share with C(--nnodes)) through its
        C(CUDA_VISIBLE_DEVICES), as the preflight found them before anything ran; a device file a process holds,
        or a process title, never widens them, and no stray on another GPU is stopped.
    type: bool
    default: false
  release_users:
    description:
      - Users (names or numeric uids) whose processes on the server's GPUs O(release_strays) may stop too, besides
        the server's own user's.
    type: list
    elements: str
    default: []
    version_added: 0.3.0
  gpus:
    description:
      - The server's GPUs (nvidia-smi's indices), when its arguments and C(CUDA_VISIBLE_DEVICES) cannot tell them
        (a C(--config) file, a MIG instance) or tell them wrong. Empty - the default - reads them from the server.
    type: list
    elements: int
    default: []
    version_added: 0.3.0
  target:
    description:
      - V(unit) switches to the unit. V(capture) switches back (a rollback) - stops the unit, verifies zero,
        releases the GPUs and starts the captured command (its wrapper loop when it had one) exactly as it ran
        (argv, environment, working directory, user, log file), in a session of its own as nohup left it. It runs
        as the captured uid and gid (a wrapper loop's own, not the server's), and enters its working directory and
        opens its log as that user - appending, never through a link, a regular file of theirs only (else its
        output goes to C(/dev/null)).
    type: str
    choices: [unit, capture]
    default: unit
  previous_of:
    description:
      - With O(target=capture), the C(run_id) of a failed restart of the serving unit that changed the unit's files.
        When that restart kept the files as they served before it (C(previous-unit.json) in the port's state folder),
        the rollback writes them back, reloads systemd and starts the unit as it served, instead of the captured
        command; otherwise it starts the captured command.
    type: str
    version_added: 0.3.0
  unit_served:
    description:
      - With O(target=capture), whether the unit served clients before this rollback. V(false) for the rollback of a
        run that failed (its unit's start, wait or verify), so the unit is stopped as one that never served, SIGTERM
        then SIGKILL of its cgroup after a short grace (10 s), even when systemd says it became active moments ago.
      - Unset, systemd's word decides (active, or became active in its current start), and one that served drains
        for O(drain) at most.
    type: bool
    version_added: 0.3.0
  restart:
    description: Restart the unit through the switch when it already serves the port.
    type: bool
    default: false
  start:
    description:
      - V(false) stops what serves O(port) - the ad-hoc server (drained) or the unit, serving or still starting -,
        verifies zero and releases its GPUs, and starts nothing (RV(action=stop)); the unit is put in place and
        enabled all the same, and the capture given is kept even when the server has ended since the discovery that
        gave it. A later run with V(true) starts the unit (RV(action=start)).
      - For one rank of a multi-node server, whose ranks stop one after another (rank 0 first, since its stop ends the
        others) and start together (O(rank)).
    type: bool
    default: true
    version_added: 0.3.0
  rank:
    description:
      - The rank (C(--node-rank)) this host runs of a multi-node server (C(--nnodes) above 1) that the caller switches
        as one group, every rank's host in step. Without it the preflight refuses such a server, and a unit whose
        command is one rank of one; with it, the server on the port and the unit's command must be that rank.
      - Rank 0, once drained, has up to 20 s (within O(drain)) to end on its own before SIGKILL, so that SGLang's
        shutdown reaches the other ranks.
      - For rank 0, the port of C(--dist-init-addr), where it hosts the group's store, held by a process outside the
        server's family and the unit is a problem too, which names that process (a rank 0 launched by hand that still
        waits for its other ranks listens there, not yet on O(port)).
    type: int
    version_added: 0.3.0
  executable:
    description: The unit's ExecStart executable; preflight checks that it exists and, for a Python, finds sglang.
    type: path
  command:
    description:
      - The unit's command (its ExecStart argv - the capture with the overrides). When it runs
        C(python -m sglang.launch_server) or C(sglang serve), the preflight parses its arguments with the installed
        SGLang's own argument parser, run by the server's interpreter (parse only, no GPU visible, a time limit) - an
        unknown, removed or ambiguous flag fails the preflight with argparse's message, before anything is stopped.
      - The parse needs no secret's value; give it with its secrets masked (P(inferops.sglang.redact_argv#filter),
        as the cutover role does), so that none reaches the module's arguments. Secrets it still holds (the values of
        C(--api-key) and the other secret flags, and of any prefix argparse takes for them) are masked in the
        module's result and in the arguments it returns.
    type: list
    elements: str
    default: []
    version_added: 0.2.0
  user:
    description:
      - The unit's C(User=) (a name or a number). The preflight's questions to the unit's interpreter (SGLang's
        version, the argument parse) run as this user and O(group), with its own groups, a clean environment
        (C(PATH) of the system's folders, its C(HOME), C(LANG=C.UTF-8)) and no way back to root. As root (the
        default) they run only when no other user can change the interpreter, its venv, its site-packages, their
        C(.pth) files or the sglang package; otherwise they are skipped with a warning naming the path and its owner.
    type: str
    default: root
    version_added: 0.2.0
  group:
    description: The unit's C(Group=); default the primary group of O(user).
    type: str
    version_added: 0.2.0
  timeout:
    description: Seconds to wait for the switch (it goes on on the host after that). Default O(drain) + 120.
    type: float
  install:
    description: The unit's files as rendered by the P(inferops.sglang.systemd_unit#role) role (its C(render)
      entry point), put in place before the preflight. With O(target=unit) only.
    type: dict
    version_added: 0.2.0
    # its suboptions are sglang_unit's options for the unit's files: inferops.sglang.unit_files.suboptions
  weights:
    description:
      - The unit of SGLang's weight cache daemon that the unit requires (the P(inferops.sglang.systemd_unit#role)
        role's C(systemd_unit_rendered_weights)), for a server that maps its weights from it (SGLang 0.5.17 and
        later). Its processes hold the server's GPUs and are neither the server's family nor strays.
      - With O(install), its unit is verified and put in place with the unit's. A switch or restart that changes
        it (or the environment file the two share) stops the daemon once the server stopped, and the unit's start
        starts it again first; one that changes only the server's unit leaves the daemon and the weights it holds
        as they are. A rollback to the captured command stops it once the unit stopped (its GPU memory freed).
    type: dict
    version_added: 0.3.0
    suboptions:
      name:
        description: The daemon's service name, without C(.service).
        type: str
        required: true
      unit:
        description: The daemon's unit text (needed with O(install)).
        type: str
  wait:
    description: Wait for what the switch started until it serves (nothing is waited for in check mode).
    type: dict
    version_added: 0.2.0
    # its suboptions are model_wait's options for the wait, the URL and the model: inferops.sglang.wait.suboptions
  progress:
    description: A file where the module says where the switch is, every 2 seconds while it waits for the switch and
      for O(wait) (one JSON line each, root's, 0600, in a folder that no one but root can change, created 0700 when
      missing; removed when the module ends), for a look from another connection while the module runs under
      C(async). Each line's C(says) is the phase (V(stopping), V(loading), V(warm-up), V(verifying)), the seconds
      since the module began and, once the unit started, its last log line, its secrets masked (the O(wait) key,
      the command's, the O(redact) flags', the values of secret names).
    type: path
    version_added: 0.3.0
  record:
    description: Keep the record of the switch once the server serves (with O(wait)).
    type: dict
    version_added: 0.2.0
    suboptions:
      data:
        description: What the controller knows of the cutover (secrets masked); its keys are kept.
        type: dict
        required: true
      write:
        description: Write the record's files to the port's state folder, O(state_dir)/PORT/. With V(false) the record
          is only returned.
        type: bool
        default: true
      history:
        description: How many records the state folder's C(history/) keeps, the newest; at least 1.
        type: int
        default: 20
        version_added: 0.3.0
attributes:
  check_mode:
    support: full
    details: Runs the preflight and says what the switch would do.
  diff_mode:
    support: full
    details: With O(install), the unit's and the gate's text, the environment file's names (values masked).
  platform:
    platforms: linux
    support: full
notes:
  - The managed host needs Python's standard library and systemd; C(nvidia-smi) is used when it exists.
seealso:
  - module: inferops.sglang.sglang_discover
  - module: inferops.sglang.model_wait
  - module: inferops.sglang.cutover_record
  - module: inferops.sglang.gpu_release
"""

EXAMPLES = r"""
- name: Preflight only
  inferops.sglang.sglang_switch:
    port: 30000
    unit: sglang
    executable: /opt/sglang/venv/bin/python
  check_mode: true
  changed_when: false

- name: Switch, wait for the model and one generation, keep the record
  inferops.sglang.sglang_switch:
    port: 30000
    unit: sglang
    drain: 120
    wait:
      url: http://127.0.0.1:30000
      generate: true
      timeout: 960
    record:
      data: {host: gpu-01, port: 30000, unit: sglang.service}
  register: switched

- name: Rank 0 of a two-node server - drain and stop it, free its GPUs, start nothing yet
  inferops.sglang.sglang_switch:
    port: 30000
    unit: sglang
    rank: 0
    start: false
    drain: 120
"""

RETURN = r"""
action:
  description: V(switch) (an ad-hoc server to the unit), V(restart), V(start) (nothing ran), V(rollback) (back to the
    captured command), V(join) (a switch was in progress), V(stop) (O(start=false)) or V(none).
  returned: always
  type: str
  choices: [none, switch, restart, start, rollback, join, stop]
  sample: switch
preflight:
  description: What is on the port (owner V(adhoc), V(unit) or null), the server, its family, a wrapper, its GPUs,
    strays and protected holders on them, problems.
  returned: always
  type: dict
  sample: {owner: adhoc, gpus: [0, 1], family: [{pid: 4242, cmdline: "python -m sglang.launch_server ..."}], strays: []}
selinux:
  description:
    - Where the unit is about to run, O(executable)'s SELinux check, C(action) V(none) (not enforcing, or a type
      systemd runs), V(fix) (its folder labelled with C(commands); C(fixed)) or V(stop) (a problem says what to run).
    - Null when nothing is to be started.
  returned: always
  type: dict
  sample: {action: none, enforcing: false, path: null, type: null, commands: [], msg: null}
problems:
  description: Why the switch must not begin (the module then fails).
  returned: always
  type: list
  elements: str
  sample: []
sglang_version:
  description:
    - The version of sglang O(executable) finds, asked only when something is to be started.
    - Null without O(executable), for another program, or when there is nothing to do.
  returned: always
  type: str
  sample: 0.5.23
run_id:
  description: The id of the switch this run reports (its own, or the one of another run it found in progress or
    finished since it began, with RV(action=join)); its plan is C(switch-plan-ID.json) in the port's state folder.
  returned: when a switch ran
  type: str
  sample: 1796000000-4242
  version_added: 0.2.0
steps:
  description: Each step of the switch with its duration in seconds.
  returned: when the switch ran
  type: list
  elements: dict
  sample: [{step: stop server, seconds: 5.21}, {step: verify zero, seconds: 0.01}, {step: start unit, seconds: 0.04}]
downtime:
  description: Seconds from the first signal to the old server until the unit was started (the model load follows).
  returned: when a server was stopped
  type: float
  sample: 5.32
pid_started:
  description: The pid of the captured command started again (with O(target=capture)).
  returned: when a rollback ran
  type: int
  sample: 5120
previous_unit:
  description: The rollback put back the unit's files as they served before the failed restart O(previous_of) and
    started the unit, instead of the captured command.
  returned: when the switch ran
  type: bool
  sample: false
  version_added: 0.3.0
started_at:
  description: When the unit was started (seconds since the epoch).
  returned: when the switch ran
  type: float
  sample: 1796000000.5
units:
  description:
    - Every other system unit that could serve O(port) (its file, drop-ins, C(unit_file_state), C(active_state),
      C(main_pid), C(holds_port), C(summary)), with what the switch does to it - C(action) V(replace), V(rewrite)
      (the operator's own file of O(unit)'s name; C(changed) says what changes in it), V(refuse) or V(leave), and
      C(does) in words.
  returned: with O(target=unit)
  type: list
  elements: dict
  sample: [{unit: sglang-kimi.service, path: /etc/systemd/system/sglang-kimi.service, unit_file_state: enabled,
            active_state: inactive, action: replace, does: "backed up, disabled"}]
  version_added: 0.2.0
units_taken:
  description: The units the switch took over (C(unit), C(action), C(files), C(backups), C(before) - their state as it
    was -, C(serves)), as C(units.json) in the port's state folder keeps them for a rollback.
  returned: when the preflight passed
  type: list
  elements: dict
  sample: [{unit: sglang-kimi.service, action: replace, files: [/etc/systemd/system/sglang-kimi.service],
            before: {UnitFileState: enabled, ActiveState: inactive}, serves: false}]
  version_added: 0.2.0
installed:
  description: What O(install) found and did, as M(inferops.sglang.sglang_unit) returns it (C(changed_files),
    C(checksum), C(environment_names), C(reloaded), C(enabled_changed), C(seconds)...).
  returned: with O(install)
  type: dict
  sample: {unit: sglang.service, changed_files: [/etc/systemd/system/sglang.service], reloaded: true, seconds: 0.31}
ready_after:
  description: Seconds from the switch's end until the server it started was ready.
  returned: with O(wait), when something was started
  type: float
  sample: 412.7
model:
  description: The model the server serves (C(/v1/models)).
  returned: with O(wait), when something was started
  type: str
  sample: meta-llama/Llama-3.1-8B-Instruct
weight_cache:
  description:
    - How the unit's start had its weights from the weight cache daemon of O(weights), read once it served (the
      record's C(weight_cache), docs/record.md) - the daemon's unit, state, main pid, restarts and GPU memory
      (nvidia-smi), whether this start mapped its weights from it, and SGLang's weight load of each start in the
      unit's journal (the last is this one's) with the first of them. Null when the daemon's unit is not installed.
  returned: with O(wait) and O(weights) whose unit the server's requires, once it served
  type: dict
  sample: {unit: sglang-30000-weights.service, active_state: active, main_pid: 700, restarts: 0,
           gpu_memory_mib: 15948, mapped: true, load_seconds: [8.36, 0.05], first_load_seconds: 8.36}
generated:
  description: The answer to the test generation; it may be empty (a model whose first token ends the sequence).
  returned: with O(wait.generate), when the server served
  type: str
  sample: OK
generated_tokens:
  description: How many tokens the test generation produced (C(meta_info.completion_tokens)); at least 1.
  returned: with O(wait.generate), when the server served
  type: int
  sample: 4
  version_added: 0.2.0
wait_failed:
  description: True when the switch completed but what it started did not serve (the module failed).
  returned: when the wait failed
  type: bool
  sample: true
log_lines:
  description: The end of the unit's journal (or the captured command's log, read as the owner of its folder) when
    the wait failed; secrets masked.
  returned: when the wait failed
  type: list
  elements: str
  sample: ["RuntimeError: CUDA out of memory"]
record:
  description: The record of the switch, as written to the port's state folder.
  returned: with O(record), when the server served
  type: dict
  sample: {action: switch, port: 30000, downtime_switch_sec: 5.3, load_sec: 412.7}
report:
  description: The record as markdown (C(last.md)).
  returned: with O(record), when the server served
  type: str
  sample: "# Cutover of port 30000 on gpu-01"
record_written:
  description: The record's files that differed and were written.
  returned: with O(record), when the server served
  type: list
  elements: str
  sample: [/var/lib/inferops/cutover/30000/last.json]
record_removed:
  description: The oldest records that the history no longer keeps, removed once the record was written.
  returned: with O(record), when the server served and the record was written
  type: list
  elements: str
  sample: [/var/lib/inferops/cutover/30000/history/20261101T101500Z-cutover.json]
  version_added: 0.3.0
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.inferops.sglang.plugins.module_utils._manager_sglang_switch import HISTORY_KEEP, SglangSwitch
from ansible_collections.inferops.sglang.plugins.module_utils._specs import (
    HANDOVER_SPEC, REDACT_SPEC, TAKEOVER_SPEC, UNIT_FILES_SPEC, WAIT_SPEC)
from ansible_collections.inferops.sglang.plugins.module_utils._switch.states import Targets


def main():
    module = AnsibleModule(
        argument_spec=dict(
            TAKEOVER_SPEC,
            release_strays=dict(type="bool", default=False),
            release_users=dict(type="list", elements="str", default=[]),
            gpus=dict(type="list", elements="int", default=[]),
            target=dict(type="str", choices=[Targets.UNIT, Targets.CAPTURE], default=Targets.UNIT),
            restart=dict(type="bool", default=False),
            start=dict(type="bool", default=True),
            rank=dict(type="int"),
            previous_of=dict(type="str"),
            unit_served=dict(type="bool"),
            executable=dict(type="path"),
            command=dict(type="list", elements="str", default=[]),
            user=dict(type="str", default="root"),
            group=dict(type="str"),
            timeout=dict(type="float"),
            progress=dict(type="path"),
            install=dict(type="dict", options=UNIT_FILES_SPEC),
            weights=dict(type="dict", options=dict(name=dict(type="str", required=True), unit=dict(type="str"))),
            wait=dict(type="dict", options=dict(WAIT_SPEC, url=dict(type="str", required=True), model=dict(type="str"))),
            record=dict(type="dict", options=dict(
                data=dict(type="dict", required=True),
                write=dict(type="bool", default=True),
                history=dict(type="int", default=HISTORY_KEEP),
            )),
            **dict(REDACT_SPEC, **HANDOVER_SPEC)
        ),
        supports_check_mode=True,
    )
    SglangSwitch(module).run()


if __name__ == "__main__":
    main()
