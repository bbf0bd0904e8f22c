"""The server's argument parser, at the real module path and with the real call shape:

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)          # every option of the emulated version, as the real wheel adds them
    raw = parser.parse_args(argv)            # no side effects
    server_args = ServerArgs.from_cli_args(raw)

prepare_server_args(argv) does the three steps, as in the real wheels (prog "sglang serve" from 0.5.15).
The options come from sglang/_double/cli_options.py, generated from the real wheels; the values the double
acts on are typed here. --config files are not read by the double (it says so and exits 2).
"""
import argparse

from sglang._double.cli_options import OPTIONS
from sglang._double.config import at_least, emulated_version

# what the double acts on: dest -> (type, default); 0.5.5/0.5.9 keep the long spelling's dest
# (tensor_parallel_size) and copy it in from_cli_args, as the real from_cli_args does
_TYPED = {
    "model_path": (str, None), "tokenizer_path": (str, None), "served_model_name": (str, None),
    "host": (str, "127.0.0.1"), "port": (int, 30000), "base_gpu_id": (int, 0), "api_key": (str, None),
    "context_length": (int, None), "tp_size": (int, 1), "dp_size": (int, 1), "pp_size": (int, 1),
    "ep_size": (int, 1), "nnodes": (int, 1), "node_rank": (int, 0), "dist_init_addr": (str, None),
    "dist_timeout": (int, None), "tokenizer_worker_num": (int, 1), "max_total_tokens": (int, None),
}
_OLD_SIZES = {"tensor_parallel_size": "tp_size", "data_parallel_size": "dp_size",
              "pipeline_parallel_size": "pp_size", "expert_parallel_size": "ep_size"}


class ServerArgs:
    """The parsed server arguments (every option of the emulated version, as attributes)."""

    def __init__(self, **values):
        self.__dict__.update(values)

    @staticmethod
    def add_cli_args(parser: argparse.ArgumentParser):
        for names, dest, nargs in OPTIONS[emulated_version()]:
            kwargs = {"dest": dest}
            if dest == "model_path":
                kwargs["required"] = True
            if dest == "weight_cache_mode":  # 0.5.17 server_args.py:3388-3400
                kwargs["choices"] = ["off", "daemon", "client"]
            if nargs == 0:
                kwargs["action"] = "store_true"
            else:
                kwargs["nargs"] = nargs
            parser.add_argument(*names, **kwargs)

    @classmethod
    def from_cli_args(cls, args: argparse.Namespace):
        values = dict(vars(args))
        for old, new in _OLD_SIZES.items():
            if old in values:
                values[new] = values.pop(old)
        if values.get("config"):
            raise SystemExit("--config: the SGLang double does not read config files; give the options on the command line")
        for dest, (typ, default) in _TYPED.items():
            value = values.get(dest)
            try:
                values[dest] = default if value is None else typ(value)
            except ValueError:
                raise SystemExit("argument --%s: invalid %s value: %r" % (dest.replace("_", "-"), typ.__name__, value))
        for dest in ("tp_size", "dp_size", "pp_size"):
            if values[dest] < 1:
                raise SystemExit("--%s must be >= 1" % dest.replace("_", "-"))
        if not 0 <= values["node_rank"] < values["nnodes"]:
            raise SystemExit("--node-rank %d is not a rank of --nnodes %d" % (values["node_rank"], values["nnodes"]))
        return cls(**values)


def prepare_server_args(argv):
    parser = argparse.ArgumentParser(prog="sglang serve") if at_least(emulated_version(), "0.5.15") else argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    raw_args = parser.parse_args(argv)
    server_args = ServerArgs.from_cli_args(raw_args)
    mode = getattr(server_args, "weight_cache_mode", None) or "off"
    if mode != "off" and getattr(server_args, "speculative_algorithm", None) is not None:
        # 0.5.17 server_args.py:7326-7332 (ServerArgs.__post_init__), 0.5.23 arg_groups/model_path_hook.py:281-287
        raise ValueError(
            "--weight-cache-mode is not supported together with speculative "
            "decoding (--speculative-algorithm): the weight cache daemon does "
            "not export the draft model's weights. Disable one of them "
            "(--weight-cache-mode off) for this configuration."
        )
    if mode == "daemon":
        raise SystemExit("--weight-cache-mode daemon: the SGLang double does not emulate engine-spawned weight cache "
                         "daemons; run `python -m sglang.srt.weight_cache.daemon` and --weight-cache-mode client")
    return server_args
