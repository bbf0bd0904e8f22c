"""Facts read from a real sglang wheel: its own source and metadata, parsed (AST) and never imported.

Each reader names the file it reads. A change in the real source that a reader no longer understands
raises WheelShapeError, so a new version fails loudly instead of yielding an empty fact.
"""
import ast
import configparser
import re
import zipfile

HTTP_SERVER = "sglang/srt/entrypoints/http_server.py"
SERVER_ARGS = "sglang/srt/server_args.py"
SCHEDULER = "sglang/srt/managers/scheduler.py"
DP_CONTROLLER = "sglang/srt/managers/data_parallel_controller.py"
DETOKENIZER = "sglang/srt/managers/detokenizer_manager.py"
ENGINE = "sglang/srt/entrypoints/engine.py"
COMMON = "sglang/srt/utils/common.py"
TOKENIZER_MANAGER = "sglang/srt/managers/tokenizer_manager.py"
# where each version builds the schedulers' torch.distributed init (model_runner until 0.5.15, bootstrap in 0.5.23)
DIST_INIT = ("sglang/srt/model_executor/model_runner.py", "sglang/srt/distributed/bootstrap.py")

# argparse actions that take no value, by name (a class action is looked up in the wheel)
_NO_VALUE_ACTIONS = {"store_true", "store_false", "store_const", "count", "help", "version"}


class WheelShapeError(AssertionError):
    """The wheel's source no longer has the shape a reader expects."""


class RealWheel:
    def __init__(self, path):
        self.path = str(path)
        self.zip = zipfile.ZipFile(self.path)
        self.names = set(self.zip.namelist())
        self._trees = {}

    # --- raw access ----------------------------------------------------------------------
    def text(self, name):
        return self.zip.read(name).decode("utf-8")

    def tree(self, name):
        if name not in self._trees:
            self._trees[name] = ast.parse(self.text(name), filename=name)
        return self._trees[name]

    def dist_info(self, leaf):
        hits = [n for n in self.names if re.match(r"sglang-[^/]+\.dist-info/%s$" % re.escape(leaf), n)]
        if len(hits) != 1:
            raise WheelShapeError("%s: no single dist-info/%s" % (self.path, leaf))
        return self.text(hits[0])

    @property
    def version(self):
        return re.search(r"^Version: (\S+)$", self.dist_info("METADATA"), re.M).group(1)

    # --- console scripts -----------------------------------------------------------------
    def console_scripts(self):
        """{name: 'module:function'} from entry_points.txt."""
        cp = configparser.ConfigParser(delimiters=("=",))
        cp.optionxform = str
        cp.read_string(self.dist_info("entry_points.txt"))
        return {k: v.strip() for k, v in cp["console_scripts"].items()} if cp.has_section("console_scripts") else {}

    # --- HTTP ----------------------------------------------------------------------------
    def routes(self):
        """{path: set of methods} of the `@app.<method>("/path")` decorators in http_server.py."""
        out = {}
        for node in ast.walk(self.tree(HTTP_SERVER)):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for dec in node.decorator_list:
                if (isinstance(dec, ast.Call) and isinstance(dec.func, ast.Attribute)
                        and isinstance(dec.func.value, ast.Name) and dec.func.value.id == "app"
                        and dec.args and isinstance(dec.args[0], ast.Constant)):
                    methods = {dec.func.attr.upper()}
                    if dec.func.attr == "api_route":
                        kw = {k.arg: k.value for k in dec.keywords}
                        methods = set(ast.literal_eval(kw["methods"])) if "methods" in kw else {"GET"}
                    out.setdefault(dec.args[0].value, set()).update(methods)
        if not out:
            raise WheelShapeError("%s: no @app route decorators" % HTTP_SERVER)
        return out

    # --- several nodes -------------------------------------------------------------------
    def dummy_health_routes(self):
        """(paths, guarded) of launch_dummy_health_check_server in utils/common.py: the `@app.get` paths of the app it
        builds, and whether it adds the --api-key middleware."""
        func = self._function(COMMON, "launch_dummy_health_check_server")
        paths = set()
        for node in ast.walk(func):
            if isinstance(node, ast.AsyncFunctionDef) or isinstance(node, ast.FunctionDef):
                for dec in node.decorator_list:
                    if (isinstance(dec, ast.Call) and isinstance(dec.func, ast.Attribute) and dec.func.attr == "get"
                            and isinstance(dec.func.value, ast.Name) and dec.func.value.id == "app"):
                        paths.add(dec.args[0].value)
        if not paths:
            raise WheelShapeError("%s: launch_dummy_health_check_server has no @app.get routes" % COMMON)
        guarded = any(isinstance(n, ast.Name) and n.id == "add_api_key_middleware" for n in ast.walk(func))
        return paths, guarded

    def follower_block(self):
        """What engine.py does for `if <...>.node_rank >= 1:` (the block before the detokenizer's launch): a dict with
        `dummy_health` (it calls launch_dummy_health_check_server), `returns` (it returns before the detokenizer and
        tokenizer manager), `sigterm_handler` (it installs a SIGTERM handler), `line` (where it starts)."""
        blocks = [n for n in ast.walk(self.tree(ENGINE)) if isinstance(n, ast.If) and _is_node_rank_ge_1(n.test)]
        if len(blocks) != 1:
            raise WheelShapeError("%s: %d `node_rank >= 1` blocks, not one" % (ENGINE, len(blocks)))
        block = blocks[0]
        inside = [n for stmt in block.body for n in ast.walk(stmt)]
        calls = {_call_name(n) for n in inside if isinstance(n, ast.Call)}
        sigterm = any(isinstance(n, ast.Call) and _call_name(n) == "signal" and n.args
                      and isinstance(n.args[0], ast.Attribute) and n.args[0].attr == "SIGTERM" for n in inside)
        return {"dummy_health": "launch_dummy_health_check_server" in calls,
                "returns": isinstance(block.body[-1], ast.Return), "sigterm_handler": sigterm, "line": block.lineno}

    def follower_returns_from_launch_server(self):
        """Whether http_server.py's launch_server returns for a rank >= 1 once its schedulers ended (`if <...>.node_rank
        >= 1: return`) instead of going on to the API server."""
        func = self._function(HTTP_SERVER, "launch_server")
        return any(isinstance(n, ast.If) and _is_node_rank_ge_1(n.test) and isinstance(n.body[0], ast.Return)
                   for n in ast.walk(func))

    def shutdown_broadcast(self):
        """Whether the tokenizer manager's stop sends ShutdownReq to the schedulers (which rank 0's scheduler hands to
        every TP rank, the other nodes' included): `self._dispatch_to_scheduler(ShutdownReq())`."""
        return any(isinstance(n, ast.Call) and _call_name(n) == "_dispatch_to_scheduler" and n.args
                   and isinstance(n.args[0], ast.Call) and _call_name(n.args[0]) == "ShutdownReq"
                   for n in ast.walk(self.tree(TOKENIZER_MANAGER)))

    def dist_timeout_passed(self):
        """Where init_distributed_environment(..., timeout=<...>.dist_timeout) is called: [(file, line)]."""
        found = []
        for name in DIST_INIT:
            if name not in self.names:
                continue
            for n in ast.walk(self.tree(name)):
                if isinstance(n, ast.Call) and _call_name(n) == "init_distributed_environment":
                    kw = {k.arg: k.value for k in n.keywords}
                    if isinstance(kw.get("timeout"), ast.Attribute) and kw["timeout"].attr == "dist_timeout":
                        found.append((name, n.lineno))
        return found

    def scheduler_exception_sigquits_parent(self):
        """Whether run_scheduler_process's `except Exception` sends SIGQUIT to its parent, and the launch-phase handler
        for it kills the whole tree with the process itself (`kill_process_tree(os.getpid())`, include_parent
        defaulting to True)."""
        run = self._function(SCHEDULER, "run_scheduler_process")
        sigquit = any(isinstance(h, ast.ExceptHandler) and any(
            isinstance(c, ast.Call) and _call_name(c) == "send_signal" and c.args
            and isinstance(c.args[0], ast.Attribute) and c.args[0].attr == "SIGQUIT" for c in ast.walk(h))
            for h in ast.walk(run))
        handler = self._function(ENGINE, "launch_phase_sigquit_handler")
        kills_itself = any(isinstance(c, ast.Call) and _call_name(c) == "kill_process_tree" and len(c.args) == 1
                           and not c.keywords for c in ast.walk(handler))
        return sigquit and kills_itself

    def tp_rank_range_per_node(self):
        """Whether the schedulers' launch gives each node `range(tp_size_per_node * (node_rank % nnodes_per_tp_group),
        tp_size_per_node * (node_rank % nnodes_per_tp_group + 1))`."""
        text = re.sub(r"\s+", " ", self.text(ENGINE))
        rank = r"(?:server_args\.)?node_rank"
        return bool(re.search(r"range\( ?tp_size_per_node \* \(%s %% nnodes_per_tp_group\), ?tp_size_per_node \* "
                              r"\(%s %% nnodes_per_tp_group \+ 1\),? ?\)" % (rank, rank), text))

    def _function(self, name, func):
        hits = [n for n in ast.walk(self.tree(name))
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == func]
        if not hits:
            raise WheelShapeError("%s: no function %s" % (name, func))
        return hits[0]

    def api_key_open_prefixes(self):
        """Path prefixes the --api-key middleware lets through without a key.

        http_server.py imports add_api_key_middleware from the module that holds it; the prefixes are the
        `<...path...>.startswith("<prefix>")` tests in that function and the module functions it calls."""
        module = None
        for node in ast.walk(self.tree(HTTP_SERVER)):
            if isinstance(node, ast.ImportFrom) and any(a.name == "add_api_key_middleware" for a in node.names):
                module = node.module
        if module is None:
            raise WheelShapeError("%s does not import add_api_key_middleware" % HTTP_SERVER)
        name, tree, funcs = self._defining_module(module, "add_api_key_middleware")
        seen, todo, prefixes = set(), ["add_api_key_middleware"], set()
        while todo:
            fn = todo.pop()
            if fn in seen or fn not in funcs:
                continue
            seen.add(fn)
            for node in ast.walk(funcs[fn]):
                if not isinstance(node, ast.Call):
                    continue
                if isinstance(node.func, ast.Name):
                    todo.append(node.func.id)
                elif (isinstance(node.func, ast.Attribute) and node.func.attr == "startswith"
                      and "path" in ast.unparse(node.func.value) and node.args
                      and isinstance(node.args[0], ast.Constant)):
                    prefixes.add(node.args[0].value)
        if not prefixes:
            raise WheelShapeError("%s: no open path prefixes found in add_api_key_middleware" % name)
        return prefixes, "%s:add_api_key_middleware" % name

    def _defining_module(self, module, func):
        """(file, tree, {name: function}) of the module that defines func, following `from x import *`."""
        for name in (module.replace(".", "/") + ".py", module.replace(".", "/") + "/__init__.py"):
            if name in self.names:
                break
        tree = self.tree(name)
        funcs = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        if func in funcs:
            return name, tree, funcs
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and node.level == 0 and any(a.name in ("*", func) for a in node.names):
                try:
                    return self._defining_module(node.module, func)
                except WheelShapeError:
                    continue
        raise WheelShapeError("%s does not define %s" % (name, func))

    # --- process titles ------------------------------------------------------------------
    def _setproctitle_args(self, name):
        out = []
        for node in ast.walk(self.tree(name)):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "setproctitle" and node.args):
                out.append(node.args[0])
        return out

    def constant_title(self, name):
        """The one constant setproctitle title in a module (the DP controller, the detokenizer)."""
        titles = [a.value for a in self._setproctitle_args(name) if isinstance(a, ast.Constant)]
        if len(titles) != 1:
            raise WheelShapeError("%s: %d constant setproctitle titles" % (name, len(titles)))
        return titles[0]

    def scheduler_title_rule(self):
        """(base, [(axis, label), ...], separator) read from scheduler.py.

        The title is `base + prefix.replace(" ", separator)` where prefix is built by a chain of
        `if <cond>: prefix += f" <LABEL>{rank}"`. axis names what the condition tests: "dp" for an
        `... is not None` test (a rank that exists only when the DP controller passes one), else the
        `<axis>_size > 1` size it compares."""
        fn = None
        for node in ast.walk(self.tree(SCHEDULER)):
            if isinstance(node, ast.FunctionDef):
                for call in ast.walk(node):
                    if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                            and call.func.attr == "setproctitle" and call.args
                            and "sglang::scheduler" in ast.unparse(call.args[0])):
                        fn, title = node, call.args[0]
        if fn is None:
            raise WheelShapeError("%s: no setproctitle of sglang::scheduler" % SCHEDULER)
        if not (isinstance(title, ast.JoinedStr) and isinstance(title.values[0], ast.Constant)
                and len(title.values) == 2):
            raise WheelShapeError("%s: unexpected title expression %s" % (SCHEDULER, ast.unparse(title)))
        base = title.values[0].value
        rep = title.values[1].value
        if not (isinstance(rep, ast.Call) and isinstance(rep.func, ast.Attribute) and rep.func.attr == "replace"):
            raise WheelShapeError("%s: title suffix is not prefix.replace(...)" % SCHEDULER)
        prefix_var = rep.func.value.id
        old, new = (a.value for a in rep.args)
        chain = []
        for node in fn.body:
            if not isinstance(node, ast.If):
                continue
            adds = [s for s in node.body if isinstance(s, ast.AugAssign) and isinstance(s.target, ast.Name)
                    and s.target.id == prefix_var and isinstance(s.value, ast.JoinedStr)]
            if not adds:
                continue
            label = adds[0].value.values[0].value.strip()
            test = node.test
            if isinstance(test, ast.Compare) and isinstance(test.ops[0], ast.IsNot):
                axis = "dp"
            elif (isinstance(test, ast.Compare) and isinstance(test.ops[0], ast.Gt)
                  and isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value == 1):
                attr = test.left.attr if isinstance(test.left, ast.Attribute) else test.left.id
                axis = attr[:-len("_size")]
            else:
                raise WheelShapeError("%s: unexpected title condition %s" % (SCHEDULER, ast.unparse(test)))
            chain.append((axis, label))
        if not chain:
            raise WheelShapeError("%s: no title prefix chain" % SCHEDULER)
        return base, chain, (old, new)

    # --- argparse ------------------------------------------------------------------------
    def _action_takes_value(self, action_node):
        """Whether a custom argparse Action class (by name) consumes a value: its __init__'s nargs default."""
        name = action_node.id if isinstance(action_node, ast.Name) else action_node.attr
        for fname in sorted(self.names):
            if not (fname.startswith("sglang/srt/") and fname.endswith(".py")):
                continue
            text = self.text(fname)
            if "class %s(" % name not in text:
                continue
            for node in ast.walk(self.tree(fname)):
                if isinstance(node, ast.ClassDef) and node.name == name:
                    for item in node.body:
                        if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                            args = item.args.args + item.args.kwonlyargs
                            defaults = dict(zip([a.arg for a in item.args.args][-len(item.args.defaults):],
                                                item.args.defaults)) if item.args.defaults else {}
                            defaults.update({a.arg: d for a, d in zip(item.args.kwonlyargs, item.args.kw_defaults)
                                             if d is not None})
                            if "nargs" in [a.arg for a in args] and "nargs" in defaults:
                                return ast.literal_eval(defaults["nargs"])
                    return None  # argparse.Action's own default
        raise WheelShapeError("argparse action class %s not found in the wheel" % name)

    def _nargs(self, action, nargs):
        """argparse nargs of an option: 0 for options without a value, else None/'?'/'+'/'*'/N."""
        if nargs is not None:
            return ast.literal_eval(nargs)
        if action is None:
            return None
        if isinstance(action, ast.Constant):
            return 0 if action.value in _NO_VALUE_ACTIONS else None
        if ast.unparse(action).endswith("BooleanOptionalAction"):
            return 0
        return self._action_takes_value(action)

    def _dataclass_options(self, classes):
        """Options of `name: A[T, "help"]` / `A[T, Arg(...)]` fields (add_cli_args_from_dataclass)."""
        out = {}
        for cls in classes:
            for item in cls.body:
                if not (isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)):
                    continue
                ann = item.annotation
                if not (isinstance(ann, ast.Subscript) and isinstance(ann.value, ast.Name) and ann.value.id == "A"):
                    continue
                elts = ann.slice.elts
                typ, meta = elts[0], elts[1]
                if isinstance(meta, ast.Constant) and isinstance(meta.value, str):
                    kw = {}
                elif isinstance(meta, ast.Call) and ast.unparse(meta.func) == "Arg":
                    kw = {k.arg: k.value for k in meta.keywords}
                else:
                    continue  # not a CLI field (Derived, ...)
                if "no_cli" in kw and ast.literal_eval(kw["no_cli"]):
                    continue
                field = item.target.id
                cli = ast.literal_eval(kw["cli_name"]) if "cli_name" in kw else "--" + field.replace("_", "-")
                names = [cli] + (ast.literal_eval(kw["aliases"]) if "aliases" in kw else [])
                # a field declared twice is one dataclass field: the last declaration wins
                out[field] = (_boolean_optional(names, kw.get("action")), field, self._field_nargs(typ, kw))
        return list(out.values())

    def _field_nargs(self, typ, kw):
        if "action" in kw:
            nargs = None
            if "action_kwargs" in kw and isinstance(kw["action_kwargs"], ast.Dict):
                for k, v in zip(kw["action_kwargs"].keys, kw["action_kwargs"].values):
                    if isinstance(k, ast.Constant) and k.value == "nargs":
                        nargs = v
            return self._nargs(kw["action"], nargs)
        inner = _unwrap_optional(typ)
        head = ast.unparse(inner.value) if isinstance(inner, ast.Subscript) else ast.unparse(inner)
        own = ast.literal_eval(kw["nargs"]) if "nargs" in kw else None
        if head.endswith("Literal"):
            return None
        if head in ("List", "list", "typing.List") and "type_parser" not in kw:
            return own or "+"
        if head == "bool":
            return 0
        return own

    def cli_options(self):
        """[(option strings, dest, nargs)] of the server's parser: what ServerArgs.add_cli_args(parser) adds."""
        tree = self.tree(SERVER_ARGS)
        classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
        add = [n for n in classes["ServerArgs"].body if isinstance(n, ast.FunctionDef) and n.name == "add_cli_args"]
        if not add:
            raise WheelShapeError("%s: ServerArgs has no add_cli_args" % SERVER_ARGS)
        out = []
        for node in ast.walk(add[0]):
            if not isinstance(node, ast.Call):
                continue
            fname = ast.unparse(node.func)
            if fname == "add_cli_args_from_dataclass":
                out.extend(self._dataclass_options(self._record_classes(tree, classes)))
            elif fname.endswith(".add_argument"):
                names = tuple(ast.literal_eval(a) for a in node.args)
                kw = {k.arg: k.value for k in node.keywords}
                dest = ast.literal_eval(kw["dest"]) if "dest" in kw else _argparse_dest(names)
                out.append((_boolean_optional(names, kw.get("action")), dest, self._nargs(kw.get("action"), kw.get("nargs"))))
            elif isinstance(node.func, ast.Attribute) and node.func.attr.startswith("add_") and fname != "parser.add_argument_group":
                raise WheelShapeError("%s: add_cli_args calls %s, which this reader does not follow" % (SERVER_ARGS, fname))
        return out

    def field_defaults(self, name):
        """[the default] of each ServerArgs field called name, as its class writes it (a literal)."""
        tree = self.tree(SERVER_ARGS)
        classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
        return [ast.literal_eval(n.value) for c in self._record_classes(tree, classes) for n in c.body
                if isinstance(n, ast.AnnAssign) and getattr(n.target, "id", None) == name and n.value is not None]

    def _record_classes(self, tree, classes):
        """The classes whose fields make up ServerArgs: itself when a dataclass, else _INPUT_NAMESPACES."""
        spaces = None
        for node in tree.body:
            if (isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
                    and node.targets[0].id == "_INPUT_NAMESPACES"):
                spaces = [e.id for e in node.value.elts]
        if spaces is None:
            return [classes["ServerArgs"]]
        where = {}
        for node in tree.body:
            if isinstance(node, ast.ImportFrom):
                for a in node.names:
                    where[a.asname or a.name] = node.module
        out = []
        for name in spaces:
            mod = self.tree(where[name].replace(".", "/") + ".py")
            out.extend(n for n in mod.body if isinstance(n, ast.ClassDef) and n.name == name)
        if len(out) != len(spaces):
            raise WheelShapeError("%s: not every namespace of _INPUT_NAMESPACES was found" % SERVER_ARGS)
        return out

    def prepare_server_args_source(self):
        """The text of prepare_server_args (how the real CLI builds and runs its parser)."""
        tree = self.tree(SERVER_ARGS)
        fn = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "prepare_server_args"]
        if not fn:
            raise WheelShapeError("%s: no prepare_server_args" % SERVER_ARGS)
        return ast.get_source_segment(self.text(SERVER_ARGS), fn[0])


def _boolean_optional(names, action):
    """argparse.BooleanOptionalAction adds a --no-<name> for each long option."""
    names = tuple(names)
    if action is not None and ast.unparse(action).endswith("BooleanOptionalAction"):
        names += tuple("--no-" + n[2:] for n in names if n.startswith("--"))
    return names


def _unwrap_optional(node):
    if isinstance(node, ast.Subscript) and ast.unparse(node.value) in ("Optional", "typing.Optional"):
        return node.slice
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        parts = [p for p in (node.left, node.right) if not (isinstance(p, ast.Constant) and p.value is None)]
        return parts[0] if len(parts) == 1 else node
    if isinstance(node, ast.Subscript) and ast.unparse(node.value) in ("Union", "typing.Union"):
        parts = [p for p in node.slice.elts if not (isinstance(p, ast.Constant) and p.value is None)]
        return parts[0] if len(parts) == 1 else node
    return node


def _argparse_dest(names):
    """argparse's own dest: the first long option string, dashes stripped, inner dashes to underscores."""
    longs = [n for n in names if n.startswith("--")]
    return (longs or list(names))[0].lstrip("-").replace("-", "_")


def _call_name(call):
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None


def _is_node_rank_ge_1(test):
    """`server_args.node_rank >= 1` or `get_parallel().node_rank >= 1`."""
    return (isinstance(test, ast.Compare) and isinstance(test.left, ast.Attribute) and test.left.attr == "node_rank"
            and len(test.ops) == 1 and isinstance(test.ops[0], ast.GtE) and isinstance(test.comparators[0], ast.Constant)
            and test.comparators[0].value == 1)
