"""Writes awx/surveys/*.json, the job templates' surveys, from the roles' meta/argument_specs.yml.

    python awx/generate_surveys.py          # (re)write them
    python awx/generate_surveys.py --check  # exit 1 when one is not what this would write

A survey answer becomes an extra var, which beats the inventory and cannot be taken back, and AWX sends a
blank answer as "" or null (by release). So each question sets survey_<variable>, and the project's playbooks
(awx/project/playbooks/answers.yml) set <variable> only from an answer that is not blank: a blank answer means
the inventory's value, else the default. No question has a default and none is required. Only what a survey
can carry as the role expects it is asked: strings, paths, integers, and choices. Booleans, lists and mappings
would arrive as strings, and what names some hosts only (HOSTS_ONLY) would reach every host: they stay in the
inventory (awx/README.md lists them).
"""
import json
import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "awx" / "surveys"

# Play keywords cannot read host facts: awx/project/playbooks/cutover.yml passes them to the play.
PLAY = [
    {"variable": "survey_cutover_serial", "type": "text", "question_name": "How many hosts per batch?",
     "question_description": "A number or a percentage of the hosts (serial; 25% when blank). The next batch starts "
                             "only when this one is done."},
    {"variable": "survey_cutover_max_fail_percentage", "type": "integer", "min": 0, "max": 100,
     "question_name": "Stop the run when more than what percentage of a batch failed?",
     "question_description": "max_fail_percentage: 25 with 1 of 4 failed goes on; 0 (also when blank) stops at the "
                             "first failure, before the next batch."},
]

# Each asked option's question; a new askable option needs one here (the generator fails without it).
QUESTIONS = {
    "cutover_port": "Which port does the server listen on?",
    "cutover_unit_name": "What is the service called (without .service)?",
    "cutover_state_dir": "Where are captures and records kept?",
    "cutover_working_directory": "Which working directory should the service run in?",
    "cutover_user": "Which user should the service run as?",
    "cutover_group": "Which group should the service run as?",
    "cutover_drain_sec": "How many seconds may in-flight requests drain before the server is killed?",
    "cutover_mode": "Switch to the service now, or adopt the running server in place (the service starts later)?",
    "cutover_prewarm": "Read the model into the page cache before the stop (auto) or not (off)?",
    "cutover_prewarm_budget_sec": "How many seconds may the page-cache warm take at most?",
    "cutover_prewarm_margin_gib": "How many GiB of available memory must the warm leave free?",
    "cutover_timeout_start_sec": "How many seconds may the model take to load?",
    "cutover_liveness_interval_sec": "How many seconds between two looks of the liveness checker?",
    "cutover_watchdog_sec": "How many seconds may a served server neither answer nor be busy before it is restarted?",
    "cutover_boot_launchers": "What happens to @reboot and rc.local lines that start the server?",
    "cutover_existing_units": "What happens to other systemd units that could serve the port (replace them, or refuse)?",
    "cutover_on_upgrade": "When SGLang was upgraded under the running service, report it, or restart the service onto it?",
    "cutover_rollback_to": "When a restart of the migrated service fails, go back to its unit as it served before, or to "
                           "the hand-launched command?",
    "cutover_nccl_profile": "Which NCCL profile should the venv get?",
    "cutover_bench": "Should a throughput benchmark gate the cutover?",
    "cutover_bench_max_slowdown_pct": "How much slower (percent) may the service be than the old server?",
    "cutover_hook_before_stop": "Which task file takes the host out of the load balancer?",
    "cutover_hook_after_serving": "Which task file puts the host back into the load balancer?",
    "cutover_metrics_dir": "Which folder does the Prometheus node exporter's textfile collector read (blank: no metrics file)?",
    "cutover_record_history": "How many records (cutovers, rollbacks, adoptions) should each port's history keep?",
}

TEMPLATES = {
    # template: (description, the cutover role's entry point it runs, its options asked, extra questions)
    "cutover": ("Move each host's hand-launched SGLang server into its systemd unit.",
                "main", None, PLAY),
    "rollback": ("Back from the service to the captured command and the venv as it was.",
                 "rollback_on_purpose", ["cutover_port", "cutover_unit_name", "cutover_state_dir",
                                         "cutover_drain_sec", "cutover_timeout_start_sec", "cutover_metrics_dir"], []),
    "status": ("Read-only status of each host's SGLang server.",
               "status", ["cutover_port", "cutover_unit_name", "cutover_state_dir", "cutover_metrics_dir"], []),
}

KINDS = {"str": "text", "path": "text", "raw": "text", "int": "integer", "float": "float"}
# What belongs to some hosts, not to a run: an answer is an extra var, which every host of the job would get.
HOSTS_ONLY = ("cutover_multinode_group",)


def _text(x):
    text = " ".join(x) if isinstance(x, list) else str(x or "")
    return re.sub(r"\b[CVOIPM]\(([^)#]*)(?:#[a-z_]+)?\)", r"\1", text)  # P(FQCN#type): the FQCN


def options():
    """The cutover role's options: its main entry point's."""
    return entry_options("main")


def entry_options(entry):
    spec = yaml.safe_load((ROOT / "roles" / "cutover" / "meta" / "argument_specs.yml").read_text())
    return spec["argument_specs"][entry]["options"]


def askable(name, opt):
    return opt.get("type", "str") in KINDS and name not in HOSTS_ONLY


def question(name, opt):
    q = {"variable": "survey_" + name, "question_name": QUESTIONS[name], "required": False}
    desc = "%s: %s" % (name, _text(opt.get("description")))
    if "default" in opt:
        desc += " Role default: %s." % json.dumps(opt["default"])
    q["question_description"] = desc + " Blank: the inventory's value, else the role default."
    if "choices" in opt:
        q.update(type="multiplechoice", choices=[str(c) for c in opt["choices"]])
    else:
        q["type"] = KINDS[opt.get("type", "str")]
        if q["type"] == "integer":
            q.update(min=1 if name.endswith("_port") else 0, max=65535 if name.endswith("_port") else 1000000)
    return q


def surveys():
    out = {}
    for name, (description, entry, wanted, extra) in TEMPLATES.items():
        opts = options() if entry == "main" else entry_options(entry)
        names = wanted if wanted is not None else [n for n, o in opts.items() if askable(n, o)]
        spec = [question(n, opts[n]) for n in names]
        spec += [dict(q, required=False) for q in extra]
        out[name] = {"name": "inferops.sglang %s" % name, "description": description, "spec": spec}
    return out


def not_asked():
    """The cutover role's options a survey cannot carry as the role expects, or that belong to some hosts only (for
    awx/README.md)."""
    return [n for n, o in options().items() if not askable(n, o)]


def main(argv):
    check = "--check" in argv
    stale = []
    for name, survey in surveys().items():
        path = OUT / ("%s.json" % name)
        text = json.dumps(survey, indent=2, sort_keys=True) + "\n"
        if check:
            if not path.exists() or path.read_text() != text:
                stale.append(str(path.relative_to(ROOT)))
        else:
            OUT.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    if stale:
        print("stale (run `make surveys`): %s" % ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
