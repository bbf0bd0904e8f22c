"""What the real server imports at start that neither the server part nor the GPU machine has: a static walk of the
module-level imports reachable from the server's entry modules, read with ast from an installed tree (never
imported, so it runs on a machine without torch or a GPU).

Module level means what runs on import: the module's own statements and those in its top-level `if`/`with`
blocks, not function bodies, `if TYPE_CHECKING:` blocks or `try:` blocks that handle the failure.
"""
import ast
import os
import sys

# where the real server starts (sglang/launch_server.py imports http_server inside run_server), the processes it
# spawns, and what a Llama with the triton attention backend loads
ROOTS = (
    "sglang.launch_server", "sglang.cli.main", "sglang.cli.serve",
    "sglang.srt.entrypoints.http_server", "sglang.srt.entrypoints.engine",
    "sglang.srt.managers.scheduler", "sglang.srt.managers.detokenizer_manager",
    "sglang.srt.managers.tokenizer_manager", "sglang.srt.model_executor.model_runner",
    "sglang.srt.models.llama", "sglang.srt.layers.attention.triton_backend", "sglang.srt.layers.sampler",
    "sglang.srt.model_loader.loader",
)
# from 0.5.17: the weight cache daemon (python -m sglang.srt.weight_cache.daemon) and the client engine's loader
WEIGHT_CACHE_ROOTS = ("sglang.srt.weight_cache.daemon", "sglang.srt.weight_cache.ipc_loader",
                      "sglang.srt.weight_cache.protocol")


def roots_of(site):
    """ROOTS, and the weight cache's modules where the installed sglang has them."""
    has_cache = os.path.isdir(os.path.join(site, "sglang", "srt", "weight_cache"))
    return ROOTS + (WEIGHT_CACHE_ROOTS if has_cache else ())


def _guarded(node):
    """A try: whose handlers catch the import failing (ImportError, ModuleNotFoundError, Exception, bare)."""
    for h in node.handlers:
        names = []
        if h.type is None:
            return True
        for t in (h.type.elts if isinstance(h.type, ast.Tuple) else [h.type]):
            names.append(ast.unparse(t))
        if any(n.split(".")[-1] in ("ImportError", "ModuleNotFoundError", "Exception", "BaseException", "OSError",
                                    "RuntimeError", "AttributeError") for n in names):
            return True
    return False


def _skipped(test):
    """`if TYPE_CHECKING:` and `if __name__ == "__main__":` never run on import."""
    text = ast.unparse(test)
    return "TYPE_CHECKING" in text or "__name__" in text


# behind a platform or an environment test that is false on CUDA with the default settings (ROCm's aiter, Ascend,
# Apple's mlx, SGLANG_USE_MODELSCOPE, DeepGEMM for FP8 models, FA3's interface, Python 3.14's annotationlib; cuDNN's
# frontend, which flashinfer 0.6.15 imports under `if CUDNN_AVAILABLE:`, a flag its own guarded `try: import cudnn` sets)
CONDITIONAL = {"aiter", "torch_npu", "sgl_kernel_npu", "mlx", "modelscope", "deep_gemm", "flash_attn_interface",
               "annotationlib", "cudnn"}


def module_imports(tree, package):
    """Absolute names of the modules a module imports at module level."""
    found = []

    def visit(body):
        for node in body:
            if isinstance(node, ast.Import):
                found.extend(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[:len(package.split(".")) - node.level + 1]
                    mod = ".".join(base + ([node.module] if node.module else []))
                else:
                    mod = node.module
                found.append(mod)
                found.extend(mod + "." + a.name for a in node.names if a.name != "*")
            elif isinstance(node, ast.If):
                if not _skipped(node.test):
                    visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.With):
                if not any("suppress" in ast.unparse(i.context_expr) for i in node.items):
                    visit(node.body)
            elif isinstance(node, ast.Try):
                if not _guarded(node):
                    visit(node.body)
                visit(node.orelse)
                visit(node.finalbody)
    visit(tree.body)
    return found


def locate(site, name):
    """(path of the module's source in site, is_package) or None; a compiled module counts as found (no path)."""
    parts = name.split(".")
    base = os.path.join(site, *parts)
    if os.path.isfile(os.path.join(base, "__init__.py")):
        return os.path.join(base, "__init__.py"), True
    if os.path.isfile(base + ".py"):
        return base + ".py", False
    parent = os.path.dirname(base)
    if os.path.isdir(parent) and any(f.startswith(parts[-1] + ".") and f.endswith(".so") for f in os.listdir(parent)):
        return "", False
    if os.path.isdir(base):  # a namespace package
        return "", True
    return None


def missing(site, machine_list, roots=ROOTS):
    """Top-level names imported at module level, reachable from roots, found neither in site, the GPU machine's
    packages (machine_list: import names, one a line) nor the standard library."""
    with open(machine_list) as f:
        machine = {line.split("#", 1)[0].strip() for line in f} - {""}
    stdlib = set(sys.stdlib_module_names)
    tops = {e.split(".")[0] for e in os.listdir(site) if not e.endswith((".dist-info", ".data", ".libs", ".pth"))}
    lost, seen, todo = set(), set(), list(roots)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        top = name.split(".")[0]
        if top in stdlib or top in machine or top in CONDITIONAL or top in ("__future__", "__main__"):
            continue
        if top not in tops:
            lost.add(top)
            continue
        where = locate(site, name)
        if where is None:
            # `from pkg import attr`: attr is a name in pkg, not a module; a missing module shows as its parent
            continue
        path, is_pkg = where
        if not path:
            continue
        with open(path, encoding="utf-8") as f:
            try:
                tree = ast.parse(f.read())
            except SyntaxError:
                continue
        package = name if is_pkg else name.rpartition(".")[0]
        for imp in module_imports(tree, package):
            todo.append(imp)
            # importing a.b.c imports a and a.b first
            bits = imp.split(".")
            todo.extend(".".join(bits[:i]) for i in range(1, len(bits)))
    return lost
