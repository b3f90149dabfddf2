"""IPython magics: ``%%tune`` runs a cell as the trial code; line magics list and steer.

``%load_ext nbtune`` registers them. The cell body of ``%%tune`` becomes the
training function ``train(config, trial)`` (the names ``config`` and
``trial`` are in scope; globals are the notebook's), the line holds the
options::

    %%tune space --metric loss --mode min --max-budget 27 --num-trials 50 -a asha
    model = make_model(config["lr"])
    for step in trial.steps():
        loss = train_one_epoch(model)
        trial.report(step, loss=loss)

The cell returns at once: the experiment runs in the background on the Dask
runtime, its live dashboard is the cell's output and ``exp`` (``--as NAME``)
is bound in the namespace; ``exp.wait()`` blocks. The simulator cannot run
Python code, so ``--workload VAR`` (a workload model) with an empty cell body
simulates instead (the simulator finishes before the cell returns); the line
form ``%tune space --workload wl -m loss -b 27`` says the same without a body
(IPython refuses a ``%%`` magic whose body is completely empty).
``%tune_list``, ``%tune_stop``, ``%tune_pause`` and ``%tune_resume`` steer
experiments by name.
"""

from __future__ import annotations

import ast
import re
import shlex
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from nbtune.build.run_options import ResourceOptions, SearchOptions

if TYPE_CHECKING:
    from nbtune.experiment import Experiment
    from nbtune.store.store import Store

__all__ = ["TuneMagics", "load_ipython_extension", "make_trainable"]


def load_ipython_extension(ipython: Any) -> None:
    """Register the magics (``%load_ext nbtune``)."""
    ipython.register_magics(TuneMagics)


def _has_code(tree: ast.Module) -> bool:
    return any(not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))
               for s in tree.body) if tree.body else False


class _NoGenerators(ast.NodeVisitor):
    """The cell body runs as a plain function: ``yield``/``await`` would change what it is."""

    def visit_FunctionDef(self, node: ast.AST) -> None:  # nested functions may do as they like
        return None

    visit_AsyncFunctionDef = visit_Lambda = visit_ClassDef = visit_FunctionDef

    def generic_visit(self, node: ast.AST) -> None:
        if isinstance(node, ast.Yield | ast.YieldFrom | ast.Await):
            raise UsageError("the %%tune cell body is the trial function body; it cannot "
                             "use yield or await at its top level")
        super().generic_visit(node)


def make_trainable(code: str, namespace: dict[str, Any], name: str = "train") -> Any:
    """Compile ``code`` as the body of ``def name(config, trial)`` with ``namespace`` as globals.

    Built from the AST, not by indenting text, so multi-line strings in the
    cell keep their content. The function's module is the notebook's
    (``__main__``), so cloudpickle ships it to Dask workers by value.
    """
    tree = ast.parse(code, filename=f"<%%tune {name}>")
    _NoGenerators().visit(tree)
    args = ast.arguments(posonlyargs=[], args=[ast.arg("config"), ast.arg("trial")],
                         kwonlyargs=[], kw_defaults=[], defaults=[])
    body = tree.body or [ast.Pass()]
    fn = ast.FunctionDef(name=name, args=args, body=body, decorator_list=[], returns=None)
    module = ast.fix_missing_locations(ast.Module(body=[fn], type_ignores=[]))
    scope: dict[str, Any] = {}
    exec(compile(module, f"<%%tune {name}>", "exec"), namespace, scope)
    train = scope[name]
    train.__nbtune_source__ = code
    return train


#: tune()'s keywords as the magic spells them, for messages that come from tune()
#: nbtune.tune's defaults, which %%tune's options share
_SEARCH, _RESOURCES = SearchOptions(), ResourceOptions()
_OPTIONS = {"name": "--name", "metric": "--metric", "mode": "--mode", "max_budget": "--max-budget",
            "min_budget": "--min-budget", "num_trials": "--num-trials",
            "algorithm": "--algorithm", "allocator": "--allocator", "runtime": "--runtime",
            "store": "--store", "seed": "--seed"}
# ``name=`` anywhere; a bare word only when it cannot be prose (``num_trials``, not ``mode``)
_KEYWORD = re.compile(r"\b(" + "|".join(_OPTIONS) + r")(=)|\b("
                      + "|".join(k for k in _OPTIONS if "_" in k) + r")\b()")


def _usage(exc: Exception) -> UsageError:
    """``tune()``'s error in the magic's words (``--num-trials``, not ``num_trials``).

    A UsageError prints its message alone: no traceback quoting the cell body.
    """
    text = _KEYWORD.sub(lambda m: _OPTIONS[m.group(1) or m.group(3)] + (" " if m.group(2) else ""),
                        str(exc))
    text = re.sub(r"(--[a-z-]+) (\s)", r"\1\2", text)  # "name= or" -> "--name or"
    if not isinstance(exc, ValueError | TypeError):
        text = f"{type(exc).__name__}: {text}"
    return UsageError(text)


def _option(text: str) -> tuple[str, Any]:
    key, sep, raw = text.partition("=")
    if not sep or not key.isidentifier():
        raise UsageError(f"-o expects KEY=VALUE (e.g. -o eta=3), got {text!r}")
    try:
        return key, ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        return key, raw  # a bare word is a string: -o sampler=tpe


@magics_class
class TuneMagics(Magics):
    """``%%tune`` and the experiment line magics; remembers experiments by name."""

    def __init__(self, shell: Any = None, **kwargs: Any) -> None:
        super().__init__(shell, **kwargs)
        self.experiments: dict[str, Any] = {}

    # ----------------------------------------------------------------- %%tune
    @magic_arguments()
    @argument("space", help="the search space: a variable (or expression) holding a dict "
              "of domains, e.g. space = {'lr': nbtune.loguniform(1e-4, 1e-1)}")
    @argument("-a", "--algorithm", default=_SEARCH.algorithm,
              help=f"algorithm name (default: {_SEARCH.algorithm})")
    @argument("-m", "--metric", required=True,
              help="metric the trials report, e.g. loss (as nbtune.tune, it has no default)")
    @argument("--mode", default=_SEARCH.mode, choices=["min", "max"],
              help=f"min or max (default: {_SEARCH.mode})")
    @argument("-b", "--max-budget", type=float, required=True,
              help="budget of a fully trained trial (epochs, steps: the unit trials report)")
    @argument("--min-budget", type=float, default=_SEARCH.min_budget,
              help=f"smallest budget (default: {_SEARCH.min_budget:g})")
    @argument("-n", "--num-trials", type=int, default=None, help="number of configurations")
    @argument("--allocator", default=_RESOURCES.allocator,
              help=f"GPU allocator name (default: {_RESOURCES.allocator}, as nbtune.tune)")
    @argument("-r", "--runtime", default=None,
              help="'dask' (default with a cell body), 'sim' (default with --workload), "
              "or a variable holding a runtime, e.g. DaskRuntime(n_workers=4)")
    @argument("-w", "--workload", default=None,
              help="a variable holding a workload model: simulate it (cell body must be empty)")
    @argument("--gpus", type=int, default=None, help="simulated GPUs for runtime 'sim'")
    @argument("--name", default=None, help="experiment name (default: experiment-N); "
              "when taken, a re-run gets the next free one (NAME-2, ...)")
    @argument("--replace", action="store_true", help="reuse a taken --name: stop the "
              "session's experiment of that name and delete it from the store")
    @argument("--store", nargs="?", const=True, default=None,
              help="persist to a store so nbtune.resume can continue it: a path or URL "
              "(bare --store: ./nbtune-store)")
    @argument("--seed", type=int, default=None, help="random seed")
    @argument("-o", "--option", action="append", default=[],
              help="algorithm option KEY=VALUE (repeatable), e.g. -o eta=3")
    @argument("--as", dest="var", default="exp", help="variable to bind the experiment to "
              "(default: exp)")
    @argument("--no-dashboard", action="store_true", help="do not display the dashboard")
    @line_cell_magic
    def tune(self, line: str, cell: str | None = None) -> None:
        """Tune the cell body as ``train(config, trial)``; see ``nbtune.ui.magics``.

        As a line magic (``%tune space --workload wl ...``) there is no body:
        that is the simulator's form.
        """
        args = parse_argstring(self.tune, line)
        if not args.var.isidentifier():
            raise UsageError(f"--as needs a variable name, got {args.var!r}")
        ns = self.shell.user_ns
        space = self._eval(args.space, "the search space")
        code = self.shell.transform_cell(cell or "")
        try:
            has_code = _has_code(ast.parse(code))
        except SyntaxError as exc:
            raise UsageError(f"the %%tune cell body is not valid Python: {exc}") from None
        runtime = self._runtime(args, has_code)
        if args.workload is not None:
            if has_code:
                raise UsageError(
                    "with --workload the simulator runs the workload model and the cell body "
                    "would never run: leave the body empty, or drop --workload to run the "
                    "body on the Dask runtime")
            trainable = self._eval(args.workload, "--workload")
        elif not has_code:
            raise UsageError("the %%tune cell body is the training code train(config, trial) "
                             "and it is empty; write it, or pass --workload VAR to simulate")
        else:
            trainable = make_trainable(code, ns, name="train")
        from IPython.display import display

        from nbtune.api import tune

        options = dict(_option(o) for o in args.option)
        store = self._store(args.store)
        name = self._name(args.name, args.replace, store)
        dash = None
        if not args.no_dashboard and getattr(self.shell, "kernel", None) is not None:
            from nbtune.ui.dashboard import Dashboard

            # build the dashboard before the trials start: its one-off cost (a fraction of
            # a second of CPU) then does not compete with their first launches
            dash = Dashboard(metric=args.metric, mode=args.mode, space=space, name=name or "")
        try:
            exp = tune(
                trainable, space, algorithm=args.algorithm, metric=args.metric,
                mode=args.mode, max_budget=args.max_budget, min_budget=args.min_budget,
                num_trials=args.num_trials, allocator=args.allocator, runtime=runtime,
                name=name, store=store, seed=args.seed, **options,
            )
        except BaseException as exc:
            if dash is not None:
                dash.close()
            if isinstance(exc, Exception):  # say what to fix; a traceback here would quote
                raise _usage(exc) from exc  # the whole cell body (IPython's run_cell_magic)
            raise
        ns[args.var] = exp
        self.experiments[exp.name] = exp
        if dash is not None:
            display(dash.attach(exp))
        elif not args.no_dashboard:
            display(exp)  # outside a kernel: the summary

    def _store(self, spec: Any) -> Any:
        """The store ``--store`` names, opened once here (the name check and ``tune`` share it)."""
        if spec is None:
            return None
        from nbtune.store import open_store  # SQLAlchemy, on demand

        try:
            return open_store(spec)
        except Exception as exc:
            raise UsageError(f"--store {spec if spec is not True else ''}: cannot open the "
                             f"store: {exc}") from exc

    def _name(self, name: str | None, replace: bool, store: Store | None) -> str | None:
        """The name a (re-)run gets: ``--name`` if free, else the next free one or, with
        ``--replace``, the same one after the old experiment is stopped and deleted.

        Re-running a cell is the notebook's way of trying again: it must start a new
        experiment, never fail on the name the cell already used.
        """
        if name is None:
            if replace:
                raise UsageError("--replace reuses the name given by --name; add --name NAME")
            return None
        known = self._known()
        stored = set(store.names()) if store is not None else set()
        if name not in known and name not in stored:
            return name
        if not replace:
            k = 2
            while f"{name}-{k}" in known or f"{name}-{k}" in stored:
                k += 1
            print(f"nbtune: an experiment named {name!r} exists; this run is "
                  f"'{name}-{k}' (--replace reuses {name!r})")
            return f"{name}-{k}"
        old = known.get(name)
        if old is not None:
            if not old.done:
                old.stop()
                old.runtime.wait(60)  # its trials end before the new run starts
            self.experiments.pop(name, None)
            for var, value in list(self.shell.user_ns.items()):
                if value is old:
                    del self.shell.user_ns[var]  # else the name would still point at it
        if name in stored:
            store.delete(name)
        return name

    def _eval(self, expr: str, what: str) -> Any:
        if len(expr) > 1 and expr[0] == expr[-1] and expr[0] in "'\"":
            expr = expr[1:-1]  # IPython keeps the quotes that let an expression hold spaces
        try:
            return self.shell.ev(expr)
        except Exception as exc:
            raise UsageError(f"{what}: cannot evaluate {expr!r}: {exc}") from None

    def _runtime(self, args: Any, has_code: bool) -> Any:
        from nbtune.build import make_runtime

        name = args.runtime or ("sim" if args.workload is not None else "dask")
        if name == "sim":
            if has_code and args.workload is None:
                raise UsageError(
                    "runtime 'sim' cannot run Python code: simulate a workload model with "
                    "--workload VAR (empty cell body), or run the body with --runtime dask")
            return make_runtime("sim", **({} if args.gpus is None else {"cluster": args.gpus}))
        if args.gpus is not None:
            raise UsageError("--gpus sizes the simulator; for Dask build the runtime in a "
                             "variable (DaskRuntime(n_workers=...)) and pass --runtime VAR")
        if name == "dask":
            return make_runtime("dask")  # the Dask runtime is imported on demand
        return self._eval(name, "--runtime")

    # ------------------------------------------------------------ line magics
    def _known(self) -> dict[str, Any]:
        """Experiments by name: those the magic started and any bound in the namespace."""
        from nbtune.experiment import Experiment

        found = dict(self.experiments)
        for value in list(self.shell.user_ns.values()):
            if isinstance(value, Experiment):
                found.setdefault(value.name, value)
        return found

    def _find(self, line: str) -> Any:
        words = shlex.split(line)
        known = self._known()
        if not words:
            if not known:
                raise UsageError("no experiments in this session")
            # the one started last, wherever it is bound (not the last name in the namespace)
            return max(known.values(), key=lambda e: getattr(e, "created", -1))
        key = words[0]
        if key in known:
            return known[key]
        from nbtune.experiment import Experiment

        value = self.shell.user_ns.get(key)
        if isinstance(value, Experiment):
            return value
        raise UsageError(f"no experiment named {key!r}; known: {', '.join(known) or 'none'}")

    @line_magic
    def tune_list(self, line: str = "") -> Any:
        """List the session's experiments: name, state, trials, errored trials, best metric."""
        import pandas as pd

        rows = []
        for name, exp in self._known().items():
            best = exp.best
            rows.append({"name": name, "state": exp.state, "trials": len(exp.engine.trials),
                         "errors": exp.errored, "metric": exp.metric,
                         "best": None if best is None else best[exp.metric],
                         "best_trial": None if best is None else best["trial_id"],
                         "runtime": exp.runtime.name})
        return pd.DataFrame(rows, columns=["name", "state", "trials", "errors", "metric", "best",
                                           "best_trial", "runtime"])

    @magic_arguments()
    @argument("name", nargs="?", default=None, help="experiment (default: the latest)")
    @argument("--trial", type=int, default=None, help="stop only this trial")
    @line_magic
    def tune_stop(self, line: str) -> None:
        """Stop an experiment (or one of its trials with --trial ID)."""
        args = parse_argstring(self.tune_stop, line)
        exp = self._find(args.name or "")
        self._live(exp)
        if args.trial is None:
            exp.stop()
        elif args.trial < 0:
            raise UsageError(f"trial ids are >= 0, got {args.trial}")
        else:  # a trial the algorithm has not created yet is ignored by the engine
            exp.stop_trial(args.trial)

    @line_magic
    def tune_pause(self, line: str) -> None:
        """Pause an experiment: running trials checkpoint and free their GPUs."""
        exp = self._find(line)
        self._live(exp)
        exp.pause()

    @line_magic
    def tune_resume(self, line: str) -> None:
        """Resume a paused experiment of this session.

        (An experiment whose kernel died continues with ``nbtune.resume(name, store=...)``.)
        """
        words = shlex.split(line)
        if words and words[0] not in self._known() and words[0] not in self.shell.user_ns:
            raise UsageError(f"no experiment {words[0]!r} in this session; to continue one "
                             f"recorded in a store use nbtune.resume({words[0]!r}, store=...)")
        exp = self._find(line)
        self._live(exp)
        exp.unpause()  # harmless if it is not paused (a pause may still be on its way)

    @staticmethod
    def _live(exp: Experiment) -> None:
        if exp.done:
            raise UsageError(f"experiment {exp.name!r} has already finished")
