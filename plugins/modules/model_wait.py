#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: model_wait
short_description: Wait for an SGLang server to load its model and serve
version_added: 0.1.0
description:
  - Follows the server through its start-up phases, as the real one goes through them, loading (nothing
    listens on the port), warm-up (C(/model_info) and C(/v1/models) answer, C(/health) is 503), ready.
  - Ready is, by default, C(/ready) answering 200 where the server has it (SGLang 0.5.23) and C(/health)
    answering 200 where it does not, plus C(/v1/models) answering.
  - Sees readiness within about 0.1 s, one request at a time (C(/health) itself takes a second or more on a
    ready server, so requests are never stacked on it).
  - Fails fast, not after the timeout, when the server can no longer come up, a O(pid) that exits, or a O(unit)
    that fails, stops, or restarts, with the unit's last journal lines (or O(log_file)'s), secrets masked.
author: inferops.sglang maintainers (@inferops)
extends_documentation_fragment:
  - inferops.sglang.attributes
  - inferops.sglang.server.redact
  - inferops.sglang.wait
options:
  url:
    description: The server's base URL.
    type: str
    default: http://127.0.0.1:30000
  ready:
    description: V(auto) (C(/ready), else C(/health)) or a path that must answer 200.
    type: str
    default: auto
  models:
    description: Also require C(/v1/models) to answer, and return the served model name.
    type: bool
    default: true
  pid:
    description: The server's main process; the wait fails as soon as it exits.
    type: int
  unit:
    description: The server's systemd unit; the wait fails as soon as it fails, stops or restarts.
    type: str
  log_file:
    description: A log to quote the end of on failure, when there is no O(unit); read as the owner of its folder
      (never a file that user could not read, never through a link at its last component).
    type: path
  lines:
    description: How many log lines to quote on failure.
    type: int
    default: 20
attributes:
  check_mode:
    support: full
    details: Returns at once without waiting.
  diff_mode:
    support: none
  platform:
    platforms: linux
    support: full
seealso:
  - module: inferops.sglang.process_count
"""

EXAMPLES = r"""
- name: Wait up to 15 minutes for the service to load its model, failing fast if the unit dies
  inferops.sglang.model_wait:
    url: http://127.0.0.1:30000
    unit: sglang.service
    timeout: 960
    api_key: "{{ sglang_api_key }}"
    generate: true
  register: loaded

- name: Show how long each phase took
  ansible.builtin.debug:
    msg: "{{ loaded.phases }}"
"""

RETURN = r"""
elapsed:
  description: Seconds spent in all.
  returned: success
  type: float
  sample: 412.8
ready_after:
  description: Seconds until the ready answer was seen.
  returned: success
  type: float
  sample: 412.5
phases:
  description: Seconds spent in each phase seen (loading, warmup).
  returned: always
  type: dict
  sample: {loading: 398.2, warmup: 14.3}
attempts:
  description: How many looks the wait took.
  returned: always
  type: int
  sample: 3981
ready_path:
  description: The path whose 200 answer meant ready.
  returned: success
  type: str
  sample: /ready
model:
  description: The served model name (the first of /v1/models).
  returned: when models is true
  type: str
  sample: meta-llama/Llama-3.1-70B-Instruct
models:
  description: Every model /v1/models lists.
  returned: when models is true
  type: list
  elements: str
  sample: [meta-llama/Llama-3.1-70B-Instruct]
version:
  description:
    - The SGLang version the server says it runs (the C(version) of its C(/server_info), or C(/get_server_info) on
      SGLang 0.5.5), or null when it does not say. Nothing else of that answer is returned (it holds the server's
      arguments, its C(--api-key) among them).
  returned: when models is true
  type: str
  sample: 0.5.15
  version_added: 0.3.0
endpoints:
  description: The last answer of each endpoint asked, status and seconds.
  returned: always
  type: dict
  sample: {/ready: {status: 200, seconds: 0.002}, /v1/models: {status: 200, seconds: 0.003}}
generated:
  description: The text of the test generation; it may be empty (a model whose first token ends the sequence).
  returned: when generate is true
  type: str
  sample: " OK"
generated_tokens:
  description: How many tokens the test generation produced (C(meta_info.completion_tokens)); at least 1.
  returned: when generate is true
  type: int
  sample: 4
  version_added: 0.2.0
log_lines:
  description: The end of the unit's journal or of the log file, secrets masked.
  returned: on failure, with unit or log_file
  type: list
  elements: str
  sample: ["RuntimeError: CUDA error: out of memory"]
skipped_wait:
  description: True in check mode, which does not wait.
  returned: in check mode
  type: bool
  sample: true
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.inferops.sglang.plugins.module_utils._manager_model_wait import ModelWait
from ansible_collections.inferops.sglang.plugins.module_utils._specs import REDACT_SPEC, WAIT_SPEC


def main():
    module = AnsibleModule(
        argument_spec=dict(
            WAIT_SPEC,
            url=dict(type="str", default="http://127.0.0.1:30000"),
            ready=dict(type="str", default="auto"),
            models=dict(type="bool", default=True),
            pid=dict(type="int"),
            unit=dict(type="str"),
            log_file=dict(type="path"),
            lines=dict(type="int", default=20),
            **REDACT_SPEC
        ),
        supports_check_mode=True,
    )
    ModelWait(module).run()


if __name__ == "__main__":
    main()
