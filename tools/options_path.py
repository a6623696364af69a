"""Follow a run's options from ``run.run_matrix`` to the runner: how many stops, in how many modules,
and how many climbs back.

A static walk of the host package's AST (``matrixbench/``, report/ left out): starting from
``matrixbench.run.run_matrix`` with its ``options`` parameter tainted, each call that passes a tainted
value (a name, or anything computed from one) is followed into the function it resolves to (a function
of the same module, one imported from a matrixbench module, ``module.function``, ``self.method``, a
class's constructor, or ``obj.method`` where exactly the classes defining ``method`` are candidates),
its receiving parameters tainted in turn; assignments, loops and ``with`` spread taint inside a body.

    stops          functions the options reach (each counted once)
    modules        distinct modules among them
    climbs back    calls into a module that is already on the call chain above the caller (A -> B -> A)
    entries        per module, how many calls enter it from another module

Usage: python tools/options_path.py [ROOT] [--entry module:function] [--taint NAME] [-v]
"""
import argparse
import ast
import sys
from collections import Counter, defaultdict
from pathlib import Path


def _modules(root):
    package = root / "matrixbench"
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(root).with_suffix("")
        if "report" in rel.parts:
            continue
        name = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        yield name, ast.parse(path.read_text(), str(path))


class Index:
    def __init__(self, root):
        self.functions = {}           # qualified name -> FunctionDef
        self.imports = defaultdict(dict)   # module -> local name -> qualified target (module or module.func)
        self.methods = defaultdict(list)   # method name -> [qualified]
        self.classes = {}             # qualified class -> {method: qualified}
        for module, tree in _modules(root):
            self._index(module, tree)

    def _index(self, module, tree):
        self._index_definitions(module, tree)
        self._index_imports(module, tree)

    def _index_definitions(self, module, tree):
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.functions[f"{module}.{node.name}"] = node
            elif isinstance(node, ast.ClassDef):
                methods = {}
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        qual = f"{module}.{node.name}.{item.name}"
                        self.functions[qual] = item
                        methods[item.name] = qual
                        self.methods[item.name].append(qual)
                self.classes[f"{module}.{node.name}"] = methods

    def _index_imports(self, module, tree):
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("matrixbench"):
                for alias in node.names:
                    self.imports[module][alias.asname or alias.name] = f"{node.module}.{alias.name}"
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("matrixbench"):
                        self.imports[module][alias.asname or alias.name] = alias.name

    def resolve(self, module, cls, func):
        """The qualified functions a call expression may run."""
        if isinstance(func, ast.Name):
            for qual in (f"{module}.{func.id}", self.imports[module].get(func.id)):
                found = self._function_or_init(qual)
                if found:
                    return found
            return []
        if isinstance(func, ast.Attribute):
            base = func.value
            if isinstance(base, ast.Name) and base.id == "self" and cls:
                qual = self.classes.get(cls, {}).get(func.attr)
                return [qual] if qual else []
            if isinstance(base, ast.Name) and base.id in self.imports[module]:
                return self._function_or_init(f"{self.imports[module][base.id]}.{func.attr}")
            if func.attr.startswith("__"):
                return []
            return list(self.methods.get(func.attr, []))
        return []

    def _function_or_init(self, qual):
        if qual in self.functions:
            return [qual]
        if qual in self.classes:
            init = self.classes[qual].get("__init__")
            return [init] if init else []
        return []


def _names(node):
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _carried(node):
    """The names whose value ``node`` hands on as it is: a name, an attribute of one (``options.cold``),
    an item of one, or a call's result built from such arguments; not text formatted from them
    (an f-string, a comparison, arithmetic): a message that mentions an option does not carry it."""
    if isinstance(node, ast.Name):
        return {node.id}
    if isinstance(node, (ast.Attribute, ast.Subscript, ast.Starred)):
        return _carried(node.value)
    if isinstance(node, ast.Call):
        args = [*node.args, *(k.value for k in node.keywords)]
        return set().union(*(_carried(arg) for arg in args)) if args else set()
    if isinstance(node, (ast.Tuple, ast.List)):
        return set().union(*(_carried(item) for item in node.elts)) if node.elts else set()
    if isinstance(node, ast.IfExp):
        return _carried(node.body) | _carried(node.orelse)
    if isinstance(node, ast.BoolOp):
        return set().union(*(_carried(value) for value in node.values))
    return set()


def _tainted_body(fn, taint):
    """Spread taint through the body until it settles."""
    taint = set(taint)
    while True:
        before = len(taint)
        for node in ast.walk(fn):
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and node.value is not None:
                if _carried(node.value) & taint:
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    for target in targets:
                        taint |= _names(target)
            elif isinstance(node, (ast.For, ast.comprehension)) and _carried(node.iter) & taint:
                taint |= _names(node.target)
            elif (isinstance(node, ast.withitem) and node.optional_vars is not None
                  and _carried(node.context_expr) & taint):
                taint |= _names(node.optional_vars)
            elif isinstance(node, ast.NamedExpr) and _carried(node.value) & taint:
                taint |= _names(node.target)
        if len(taint) == before:
            return taint


def _params(fn):
    args = fn.args
    return [a.arg for a in args.posonlyargs + args.args], [a.arg for a in args.kwonlyargs]


def _callee_taint(callee, call, taint, bound):
    positional, keyword_only = _params(callee)
    if bound:
        positional = positional[1:]
    got = set()
    for param, arg in zip(positional, call.args):
        if isinstance(arg, ast.Starred):
            break
        if _carried(arg) & taint:
            got.add(param)
    if any(isinstance(arg, ast.Starred) and _carried(arg) & taint for arg in call.args):
        got |= set(positional)
    for keyword in call.keywords:
        if _carried(keyword.value) & taint:
            if keyword.arg is None:
                got |= set(positional) | set(keyword_only)
            else:
                got.add(keyword.arg)
    return got


def walk(index, entry, taint_names):
    stops, entries, climbs, order = set(), Counter(), 0, []
    stack = [(entry, frozenset(taint_names), (entry.rsplit(".", 1)[0],))]
    seen = set()
    while stack:
        qual, taint, chain = stack.pop()
        if (qual, taint) in seen:
            continue
        seen.add((qual, taint))
        stops.add(qual)
        order.append((qual, chain))
        fn = index.functions[qual]
        module, cls = _owner(index, qual)
        spread = _tainted_body(fn, taint)
        for call in (n for n in ast.walk(fn) if isinstance(n, ast.Call)):
            if not any(_carried(a) & spread for a in [*call.args, *(k.value for k in call.keywords)]):
                continue
            for callee in index.resolve(module, cls, call.func):
                callee_module, callee_cls = _owner(index, callee)
                got = _callee_taint(index.functions[callee], call, spread, bound=callee_cls is not None)
                if not got:
                    continue
                if callee_module != module:
                    entries[callee_module] += 1
                    if callee_module in chain[:-1]:
                        climbs += 1
                stack.append((callee, frozenset(got), chain + ((callee_module,) if callee_module != chain[-1] else ())))
    return stops, entries, climbs, order


def _owner(index, qual):
    for cls in index.classes:
        if qual.startswith(cls + ".") and qual.count(".") == cls.count(".") + 1:
            return cls.rsplit(".", 1)[0], cls
    return qual.rsplit(".", 1)[0], None


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", nargs="?", default=".")
    parser.add_argument("--entry", default="matrixbench.run:run_matrix")
    parser.add_argument("--taint", default="options")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    index = Index(Path(args.root))
    module, function = args.entry.split(":")
    stops, entries, climbs, order = walk(index, f"{module}.{function}", {args.taint})
    modules = {_owner(index, qual)[0] for qual in stops}
    print(f"{len(stops)} stops in {len(modules)} modules, {climbs} climbs back")
    print("entries: " + ", ".join(f"{m} {n}" for m, n in entries.most_common()))
    if args.verbose:
        for qual, chain in order:
            print(f"  {qual}    [{' > '.join(chain)}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
