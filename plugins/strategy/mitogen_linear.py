# gpucluster: mitogen's linear strategy (the `mitogen` package, pinned in pyproject.toml), found
# through ansible.cfg's strategy_plugins = plugins/strategy, so no path into the virtual
# environment's site-packages is written anywhere. mitogen keeps one Python interpreter per node
# and sends modules over it instead of an SSH round trip and a new interpreter per task: the
# bench (README "Speed") measured fresh 104 -> 61 s and no-op 50 -> 29 s at one node.
# Set ANSIBLE_STRATEGY=linear to run without it.
#
# It also imports this collection's filter, test and action plugins once, in the controller's
# main process, before any worker is forked. Ansible forks a worker per task and host; a
# worker that templates `gpucluster.cluster.<filter>` or runs the contract action imports that
# plugin and the module_utils it uses, and the collection loader compiles their source anew in
# every worker (no bytecode cache), only for the worker to exit. The plugin loader reuses a
# module already in sys.modules (PluginLoader._load_module_source), which the fork inherits.
#
# And it lists the installed collections once, likewise before the first fork: mitogen's
# planner lists them again (ansible.collections.list.list_collection_dirs, a walk over every
# collection the `ansible` package installs) for each collection module a worker runs - 3,040
# directory scans and 3.4 of 26.5 worker CPU-seconds in a no-op run at one node.
#
# And it compiles each module_utils file once per run for mitogen's module scan: the scan
# (ansible_mitogen.module_finder, run by the ModuleDepService in the controller's main process
# the first time a run uses a module) compiles the module and every module_utils file it imports,
# again for each module - 1,048 compiles for 23 modules, 1.5 of the scan's 1.7 CPU-seconds,
# in the same process as the strategy's loop (memoize_scan_compile).
#
# And it decides in the controller the tasks whose `when` is false for a host, instead of forking
# a worker only to evaluate the condition there (controller_skip). A fork costs 3.4 ms for a
# 94 MB controller on the 2-core bench machine and grows with its memory; 159 of the 381 tasks of
# a no-op site.yml run per node are skipped ones. The condition is evaluated on the variables the
# worker would see (the task's play context applied, ansible_search_path set), the skipped result
# is the worker's (skip_reason, false_condition, _ansible_no_log, deferred warnings), and it goes
# back through the results queue, so callbacks, register and the recap see no difference. Any
# task with a loop (per-item conditions) or delegate_to, or whose condition is true or raises,
# goes to a worker as before.
#
# And it runs in the controller the tasks whose action never reaches the node - assert, set_fact,
# debug, validate_argument_spec: 97 of the 216 task-hosts a no-op site.yml run executes per node -
# with Ansible's own TaskExecutor on a copy of the task, instead of forking a worker for each
# (run_in_controller). Their results are held until every host of the task is queued, then go
# through the results queue like a worker's. A worker still runs such a task with a loop,
# delegate_to, until, async or a timeout. No-op at one node: 28-30 -> 22 controller CPU-s,
# 33-36 -> 27 s.
#
# And it keeps the code Jinja compiles for a template or a conditional (cache_template_compiles):
# ansible-core 2.19 compiles each again every time it is templated, for every task and host, in
# the process that runs the strategy's loop (conditions, controller actions) and in each worker
# (which inherits what the controller compiled before the fork). Keyed by the source and every
# setting the compiled code depends on. No-op at one node, 3 runs each, interleaved: the main
# process's user CPU 11.0/10.1/9.0 -> 8.6/7.6/8.0 s.
#
# And every Jinja environment reuses the filter and test functions another one resolved
# (share_template_plugins): ansible-core keeps them per environment and makes a new environment
# for nearly every template, so each filter went through the plugin loader's directory scan
# again (6 % of the main thread in a no-op). The collections are listed once per process, not
# once per play (cache_collection_dirs).
from __future__ import annotations

import builtins
import importlib
import pathlib
import re

import ansible.collections.list
import ansible_mitogen.loaders
import ansible_mitogen.module_finder
import ansible_mitogen.planner
import ansible_mitogen.strategy
from ansible import constants as C
from ansible.errors import AnsibleError
from ansible.utils.display import Display

try:  # ansible-core 2.19's own pieces of TaskExecutor._execute; without them every task goes to a worker
    from ansible._internal import _display_utils, _task
    from ansible._internal._errors import _error_utils
    from ansible._internal._templating._engine import TemplateEngine
    from ansible.executor.task_result import _RawTaskResult
except ImportError:  # pragma: no cover - another ansible-core
    _RawTaskResult = None
try:  # ansible-core 2.19's Jinja environment; without it templates compile as Ansible does (cache_template_compiles)
    from ansible._internal._templating._jinja_bits import AnsibleEnvironment as _AnsibleEnvironment
    from ansible._internal._templating._jinja_bits import _TemplateCompileContext, _TemplateConfig
    from jinja2.environment import TemplateExpression as _TemplateExpression
except ImportError:  # pragma: no cover - another ansible-core
    _AnsibleEnvironment = None
try:  # ansible-core 2.19's filter and test lookup; else each environment resolves its own (share_template_plugins)
    from ansible._internal._templating._jinja_plugins import JinjaPluginIntercept as _JinjaPluginIntercept
except ImportError:  # pragma: no cover - another ansible-core
    _JinjaPluginIntercept = None
from ansible.executor.task_executor import TaskExecutor
from ansible.plugins import loader as plugin_loader

display = Display()

DOCUMENTATION = """
name: mitogen_linear
short_description: Ansible's linear strategy over mitogen connections
description:
  - The linear strategy with mitogen's connection multiplexer (mitogen's own mitogen_linear);
    this file only makes it loadable from the checkout.
  - Imports the collection's filter, test and action plugins in the controller process before
    the first worker is forked, so no worker compiles them again.
  - Lists the installed collections once there too, for mitogen's planner, which would walk them
    again for every collection module a worker runs.
  - Compiles each module_utils file once per run for mitogen's module scan, which would compile
    it again for every module that imports it.
  - Skips in the controller a task whose condition is false for a host, with the result a worker
    would return, instead of forking a worker to evaluate it; tasks with a loop or delegate_to,
    and conditions that are true or raise, go to a worker as before.
  - Runs assert, set_fact, debug and validate_argument_spec tasks (no loop, delegate_to, until,
    async or timeout) in the controller with Ansible's TaskExecutor instead of a forked worker;
    their results reach the strategy once every host of the task is queued, as a worker's do.
  - Keeps the code Jinja compiles for each template and conditional, keyed by its source and
    the environment's compile settings, instead of compiling it again for every task and host.
  - Lets every Jinja environment reuse the filter and test functions another one resolved,
    instead of asking the plugin loader again for each new environment.
author: gpucluster
"""

COLLECTION = "gpucluster.cluster"
PRELOADED_KINDS = ("filter", "test", "action")
PLUGINS_DIR = pathlib.Path(__file__).resolve().parents[1]


def preload_plugins(plugins_dir: pathlib.Path = PLUGINS_DIR, collection: str = COLLECTION) -> list[str]:
    """Import every plugin file of PRELOADED_KINDS under the name the plugin loader gives it
    (ansible_collections.<ns>.<name>.plugins.<kind>.<file>); return the names imported. A file
    that fails to import is left to the worker, which reports the error where it is used."""
    loaded = []
    for kind in PRELOADED_KINDS:
        for path in sorted((plugins_dir / kind).glob("*.py")):
            if path.name.startswith("_"):
                continue
            name = f"ansible_collections.{collection}.plugins.{kind}.{path.stem}"
            try:
                importlib.import_module(name)
            except Exception as exc:  # noqa: BLE001 the worker that uses the plugin reports it
                display.vvv(f"gpucluster: {name} not preloaded ({exc}); the worker that uses it loads it")
                continue
            loaded.append(name)
    return loaded


def _installed(owner, attr: str, marker: str):
    """What an earlier call left at ``owner.attr``: the state it hung on its replacement as
    ``marker`` (the replacements below are installed once per process and kept by each later
    play's strategy), or None."""
    return getattr(getattr(owner, attr, None), marker, None)


def _install(owner, attr: str, replacement, marker: str, state):
    """Put ``replacement`` at ``owner.attr`` with ``state`` hung on it as ``marker``; return state."""
    setattr(replacement, marker, state)
    setattr(owner, attr, replacement)
    return state


def cache_collection_dirs(planner=ansible_mitogen.planner) -> tuple[bytes, ...]:
    """List the installed collections' directories now and hand mitogen's planner that list
    instead of a new walk per module (``planner._load_collections``, which adds each to the
    invocation's extra ``sys.path`` entries); return the list. A mitogen without that function
    is left as it is. Listed once per process: each play's strategy keeps the first one's list."""
    if isinstance(dirs := _installed(planner, "_load_collections", "gpucluster_dirs"), tuple):
        return dirs
    dirs = tuple(ansible.collections.list.list_collection_dirs())
    if not callable(getattr(planner, "_load_collections", None)):
        return dirs

    def _load_collections(invocation):
        for path in dirs:
            invocation._extra_sys_paths.add(path.decode("utf-8"))

    return _install(planner, "_load_collections", _load_collections, "gpucluster_dirs", dirs)


def memoize_scan_compile(finder=ansible_mitogen.module_finder) -> dict:
    """Give mitogen's module scan a ``compile`` that returns the code object it made before for
    the same source, name and mode (the scan reads the code's imports, never runs or changes it);
    return the cache. Only that module's name ``compile`` is rebound; calls with flags or other
    arguments go to the builtin as they are. Installed once: each play's strategy keeps the
    cache the first one made."""
    if isinstance(cache := _installed(finder, "compile", "gpucluster_cache"), dict):
        return cache
    cache = {}

    def compile(source, filename, mode, *args, **kwargs):  # noqa: A001 the name the scan calls
        if args or kwargs or not isinstance(source, (bytes, str)):
            return builtins.compile(source, filename, mode, *args, **kwargs)
        key = (source, filename, mode)
        code = cache.get(key)
        if code is None:
            code = cache[key] = builtins.compile(source, filename, mode)
        return code

    return _install(finder, "compile", compile, "gpucluster_cache", cache)


def _compile_settings(env) -> tuple:
    """What a Jinja environment's compiled code depends on besides the source: the lexer's
    settings (the key jinja2.lexer.get_lexer caches lexers by), the code generator and what it
    reads (finalize, autoescape, optimizer, async, extensions), Ansible's embedded-template
    switch, and whether Ansible's own compile escapes backslashes in expressions."""
    tcc = _TemplateCompileContext.current(optional=True)
    return (type(env), env.block_start_string, env.block_end_string, env.variable_start_string,
            env.variable_end_string, env.comment_start_string, env.comment_end_string,
            env.line_statement_prefix, env.line_comment_prefix, env.trim_blocks, env.lstrip_blocks,
            env.newline_sequence, env.keep_trailing_newline, env.code_generator_class, env.finalize,
            env.autoescape, env.optimized, env.is_async, tuple(env.extensions),
            _TemplateConfig.allow_embedded_templates, tcc.escape_backslashes if tcc else None)


def cache_template_compiles(env_class=None, limit: int = 20000) -> dict:
    """Give Ansible's Jinja environment a cache of compiled code: ansible-core 2.19 compiles every
    template and conditional again each time it is templated (TemplateEngine._compile_template
    and _compile_expression call Jinja's from_string and compile_expression, which keep no
    cache), once per task and host. The code is keyed by its source and _compile_settings, and
    a hit only binds it to the calling environment (Template.from_code), as Jinja's own
    template cache does. Template debugging (AnsibleEnvironment._debuggable_template_source),
    raw compiles and sources that are not strings go to Jinja as they are. Installed once;
    return the cache."""
    env_class = env_class or _AnsibleEnvironment
    if env_class is None:
        return {}
    if isinstance(cache := _installed(env_class, "compile", "gpucluster_cache"), dict):
        return cache
    cache = {}
    jinja_compile = env_class.compile
    jinja_compile_expression = env_class.compile_expression
    capturing = []  # one list per compile_expression under way: the trees it compiled

    def keep(key, code):
        if len(cache) >= limit:
            cache.clear()
        cache[key] = code

    def compile(self, source, name=None, filename=None, raw=False, defer_init=False):  # noqa: A001 Jinja's name
        if raw or self._debuggable_template_source:
            return jinja_compile(self, source, name, filename, raw, defer_init)
        if not isinstance(source, str):  # compile_expression's tree: that caller keys it
            code = jinja_compile(self, source, name, filename, raw, defer_init)
            if capturing:
                capturing[-1].append(code)
            return code
        key = ("template", str(source), name, filename, defer_init, _compile_settings(self))
        code = cache.get(key)
        if code is None:
            keep(key, code := jinja_compile(self, source, name, filename, raw, defer_init))
        return code

    def compile_expression(self, source, undefined_to_none=True):
        if self._debuggable_template_source or not isinstance(source, str):
            return jinja_compile_expression(self, source, undefined_to_none)
        key = ("expression", str(source), undefined_to_none, _compile_settings(self))
        code = cache.get(key)
        if code is not None:
            return _TemplateExpression(self.template_class.from_code(self, code, self.make_globals(None)),
                                       undefined_to_none)
        capturing.append([])
        try:
            expression = jinja_compile_expression(self, source, undefined_to_none)
        finally:
            captured = capturing.pop()
        if len(captured) == 1:  # the one tree it compiled; else (a nested compile) leave it uncached
            keep(key, captured[0])
        return expression

    env_class.compile_expression = compile_expression
    return _install(env_class, "compile", compile, "gpucluster_cache", cache)


def share_template_plugins(intercept_class=None) -> dict:
    """Let every Jinja environment reuse the filter and test functions another one resolved:
    ansible-core 2.19 keeps them per environment (JinjaPluginIntercept._wrapped_funcs), keyed by
    the plugin's full name, and makes a new environment for nearly every template, so each
    ``to_json`` or ``gpucluster.cluster.<filter>`` goes through the plugin loader again (a scan
    of the plugin directories). Shared per plugin type and name as asked for; an environment's
    own functions (set on it) come first, and a name the loader cannot resolve is not kept, so
    it is looked up again. A filter plugin directory that a role brings later in the run does
    not shadow a name already resolved (gpucluster's roles bring none). Installed once; return
    the shared functions."""
    intercept_class = intercept_class or _JinjaPluginIntercept
    if intercept_class is None:
        return {}
    if isinstance(shared := _installed(intercept_class, "__getitem__", "gpucluster_shared"), dict):
        return shared
    shared = {}
    resolve = intercept_class.__getitem__

    def __getitem__(self, key):
        if (func := self._wrapped_funcs.get(key)) is not None:
            return func
        name = (self._plugin_loader.type, key)
        if (func := shared.get(name)) is None:
            func = shared[name] = resolve(self, key)  # raises for a name it cannot resolve
        return func

    return _install(intercept_class, "__getitem__", __getitem__, "gpucluster_shared", shared)


def worker_variables(task, task_vars, loader) -> dict:
    """A copy of ``task_vars`` with ansible_search_path set as a worker's TaskExecutor sets it
    (_get_loop_items) before it templates the loop or the condition."""
    variables = dict(task_vars)
    search_path = task.get_search_path()
    if loader.get_basedir() not in search_path:
        search_path.append(loader.get_basedir())
    variables["ansible_search_path"] = search_path
    return variables


# The variables the play context adds to a worker's (PlayContext.update_vars: only where the
# task's variables lack them), by name.
CONNECTION_VARIABLES = frozenset(name for names in C.MAGIC_VARIABLE_MAPPING.values() for name in names)
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def reads_connection_variables(conditions) -> bool:
    """Whether a condition names one of CONNECTION_VARIABLES. Only such a condition needs the play
    context applied first: update_vars adds those variables where the task's lack them and changes
    no other, so any other condition reads the same without it - or one of them through another
    variable, which then is undefined here and sends the task to a worker."""
    return any(name in CONNECTION_VARIABLES for cond in conditions if isinstance(cond, str)
               for name in _NAME.findall(cond))


def controller_skip(host, task, task_vars, play_context, loader):
    """The result a worker would return for ``task`` on ``host`` when its ``when`` is false there:
    ``{"changed": False, "skipped": True, "skip_reason": ..., "false_condition": ...}`` as
    TaskExecutor._execute builds it. ``None`` when a worker has to run the task: no condition, a
    loop (conditions per item), delegate_to (the delegated host's variables), a condition that is
    true, or one that raises (the worker reports the error where it is raised). ``task_vars`` is
    left as it is; the condition sees what the worker's would: ansible_search_path set
    (TaskExecutor._get_loop_items) and, where it names a connection variable, the play context
    applied to a copy (reads_connection_variables; applying it for every skip was half of the
    skips' cost in a no-op). One difference: a play context field that does not template (a
    broken ``ansible_user``) fails a worker before the condition is read; here such a task is
    skipped, and the next task that reaches the node reports it."""
    if (_RawTaskResult is None or not task.when or task.loop_with or task.loop is not None
            or task.delegate_to is not None):
        return None
    return _false_condition_result(host, task, task_vars, play_context, loader)


def _false_condition_result(host, task, task_vars, play_context, loader):
    """controller_skip's evaluation of ``task.when`` for ``host``, without the loop: the skipped
    result, or None where the condition is true or raises."""
    variables = worker_variables(task, task_vars, loader)
    templar = TemplateEngine(loader=loader, variables=variables)
    conditions = task.when
    if reads_connection_variables(conditions):
        try:
            context = play_context.set_task_and_variable_override(task=task, variables=variables, templar=templar)
            context.post_validate(templar=templar)
            if not context.remote_addr:
                context.remote_addr = host.address
            context.update_vars(variables)
        except AnsibleError:
            return None
    false_condition = {}
    with _display_utils.DeferredWarningContext(variables=variables) as warnings:
        try:
            if task._resolve_conditional(conditions, variables, result_context=false_condition):
                return None
        except Exception:  # noqa: BLE001 the worker raises it again, with the task's context
            return None
        result = dict(changed=False, skipped=True, skip_reason="Conditional result was False") | false_condition
        task.update_result_no_log(templar, result)  # never raises: a no_log that does not template masks
    if found := warnings.get_warnings():
        result["warnings"] = found
    if found := warnings.get_deprecation_warnings():
        result["deprecations"] = found
    return result


def controller_empty_loop(task, task_vars, loader):
    """The result a worker returns for a task whose ``loop`` is an empty list (TaskExecutor.run:
    skipped, "No items in the list", before any condition is evaluated), made here instead: a
    stage's per-item tasks over a list that is empty on this node (no secondary NIC, no user to
    add) each cost a fork per host for nothing. ``None`` where a worker has to run it: no
    ``loop``, a ``with_*`` lookup, ``delegate_to``, a loop that is not an empty list, or one that
    raises (the worker raises it again, with the task's context). The loop is templated as the
    worker's TaskExecutor._get_loop_items does: the task's variables with ansible_search_path."""
    if _RawTaskResult is None or task.loop is None or task.loop_with or task.delegate_to is not None:
        return None
    variables = worker_variables(task, task_vars, loader)
    try:
        items = TemplateEngine(loader=loader, variables=variables).template(task.loop)
    except Exception:  # noqa: BLE001 the worker raises it again, with the task's context
        return None
    if not isinstance(items, list) or items:
        return None
    return dict(changed=False, skipped=True, skipped_reason="No items in the list", results=[])


LOOP_VARIABLES = frozenset({"ansible_loop", "ansible_loop_var", "ansible_index_var"})


class _ReachedNode(Exception):
    """A looped task that controller_skipped_loop runs here would have reached the node."""


class _NodelessExecutor(TaskExecutor):
    """TaskExecutor that stops where it would connect to the node, and says so (``reached``)."""

    reached = False

    def _get_connection(self, cvars, templar, current_connection):
        self.reached = True
        raise _ReachedNode()


class _HeldCallbacks:
    """The final queue's send_callback held back until the task is known to need no worker (its
    per-item callbacks are sent once, by whichever runs it); everything else passes through."""

    def __init__(self, final_q):
        self._final_q = final_q
        self.held = []

    def send_callback(self, *args, **kwargs):
        self.held.append((args, kwargs))

    def __getattr__(self, name):
        return getattr(self._final_q, name)


def controller_skipped_loop(host, task, task_vars, play_context, loader, variable_manager, final_q):
    """The result a worker returns for a looped task whose ``when`` is false for every item, made
    here: a stage's per-item steps that do not apply on this node (modules to load where they are
    loaded, directories of a tool the node does not use) each cost a fork per host for nothing.
    The condition must name none of the loop's variables (the loop_var, the index_var,
    ansible_loop...), so it reads the same for every item: it is evaluated once, as
    controller_skip does, and where it is false Ansible's own TaskExecutor runs the task here,
    so the registered result, each item's result and the per-item callbacks are the worker's.
    That executor stops where it would connect (a condition that read another way for an
    item): then nothing is sent, and a worker runs the task from the start (a lookup in the loop
    is then templated twice, both times in the controller, as a worker's would be). Returns the
    result and the per-item callbacks for the final queue, to be sent after v2_runner_on_start
    as a worker's are; ``None`` where a worker has to run it: no loop or a ``with_*`` lookup,
    delegate_to, until/retries, async, timeout, a pause or break_when in loop_control, a
    condition that names a loop variable, is true or raises."""
    control = task.loop_control
    if (not task.when or task.loop is None or not stays_on_its_host(task)
            or (control is not None and control.break_when)):
        return None
    names = set(LOOP_VARIABLES) | {"item"}
    for name in ((control.loop_var, control.index_var) if control is not None else ()):
        if name is not None and not (isinstance(name, str) and _NAME.fullmatch(name)):
            return None  # a templated loop_var: which name the items take is not known here
        if name:
            names.add(name)
    if any(name in names for cond in task.when if isinstance(cond, str) for name in _NAME.findall(cond)):
        return None
    if any(not isinstance(cond, (str, bool)) for cond in task.when):
        return None
    if _false_condition_result(host, task, task_vars, play_context, loader) is None:
        return None
    ran = run_without_node(host, task, task_vars, play_context, loader, variable_manager, final_q)
    if ran is None:
        return None
    data = ran[0]._return_data
    if not (isinstance(data, dict) and data.get("skipped") and data.get("results")
            and all(isinstance(r, dict) and r.get("skipped") for r in data["results"])):
        return None  # not every item skipped (one failed here): a worker runs it and reports it
    return ran


def run_without_node(host, task, task_vars, play_context, loader, variable_manager, final_q):
    """run_in_controller with Ansible's TaskExecutor stopped where it would connect to the node,
    and the final queue's callbacks (a loop's per-item ones) held: ``(result, callbacks)``, the
    callbacks to be sent after v2_runner_on_start as a worker's are; ``None`` where it would have
    connected (nothing was sent: a worker runs the task from the start)."""
    held = _HeldCallbacks(final_q)
    made = []

    def executor(*args):
        made.append(_NodelessExecutor(*args))
        return made[-1]

    raw = run_in_controller(host, task, task_vars, play_context, loader, variable_manager, held, executor=executor)
    if any(e.reached for e in made):
        return None
    return raw, held.held


# Includes: TaskExecutor templates their arguments and returns them (with a loop, per item)
# without a connection; the strategy then reads the included file. Run by the strategy itself,
# loops included (run_without_node).
INCLUDE_ACTIONS = frozenset(C._ACTION_INCLUDE_TASKS) | frozenset(C._ACTION_INCLUDE_ROLE)


def includes_in_controller(task) -> bool:
    """Whether ``task`` is an include_tasks or include_role the strategy runs itself: with or
    without ``loop`` (stays_on_its_host)."""
    return task.action in INCLUDE_ACTIONS and stays_on_its_host(task)


def stays_on_its_host(task) -> bool:
    """Whether nothing makes TaskExecutor wait or leave the task's host, so the strategy may run
    it itself: no ``with_*`` lookup, no delegate_to, no until/retries, no async, no timeout (a
    SIGALRM), no pause between a loop's items."""
    control = task.loop_control
    return (_RawTaskResult is not None and not task.loop_with and task.delegate_to is None
            and not task.until and not task.async_val and not task.timeout
            and not (control is not None and task.loop is not None and control.pause))


# Actions that never reach the node: they template and judge the task's variables in the
# controller, wherever they run. Run by the strategy itself (run_in_controller).
CONTROLLER_ACTIONS = frozenset({
    "ansible.builtin.assert", "ansible.builtin.set_fact", "ansible.builtin.debug",
    "ansible.builtin.validate_argument_spec"})


def runs_in_controller(task) -> bool:
    """Whether ``task`` runs in the strategy's process instead of a worker: one of
    CONTROLLER_ACTIONS (as resolved, so a collection's own ``debug`` is not one), without a loop
    (items may come from any lookup) and staying on its host (stays_on_its_host)."""
    return task.resolved_action in CONTROLLER_ACTIONS and task.loop is None and stays_on_its_host(task)


# Actions that can often answer from what the controller already holds for the host (this run's
# facts) and need the node only otherwise: the strategy runs them here first, and hands the task
# to a worker where the action says it needs the node (NEEDS_WORKER in its result).
CONTROLLER_FIRST_ACTIONS = frozenset({"gpucluster.cluster.contract"})
NEEDS_WORKER = "_gpucluster_needs_worker"


def tries_controller_first(task) -> bool:
    """Whether ``task`` is one of CONTROLLER_FIRST_ACTIONS with nothing that makes TaskExecutor
    wait or leave the task's host (as runs_in_controller)."""
    return task.resolved_action in CONTROLLER_FIRST_ACTIONS and task.loop is None and stays_on_its_host(task)


def run_in_controller(host, task, task_vars, play_context, loader, variable_manager, final_q, *,
                      executor=TaskExecutor):
    """Run ``task`` on ``host`` with Ansible's own TaskExecutor, as WorkerProcess._run does, here
    instead of in a forked worker; return the result the worker would put on the results queue.
    TaskExecutor sets the task's fields to their templated values for this host (post_validate),
    which a worker does on its own copy of the process: here it gets a copy of the task, and of
    the variables it adds to."""
    own = task.copy(exclude_tasks=True)
    try:
        with _task.TaskContext(own):
            result = executor(host, own, dict(task_vars), play_context, loader,
                              plugin_loader.get_plugin_loader_namespace(), final_q, variable_manager).run()
    except Exception as exc:  # noqa: BLE001 TaskExecutor.run returns its own errors; anything else fails the task, as in a worker
        result = _error_utils.result_dict_from_exception(exc)
    return _RawTaskResult(host=host, task=own, return_data=result, task_fields=own.dump_attrs())


class StrategyModule(ansible_mitogen.strategy.StrategyMixin,
                     ansible_mitogen.loaders.strategy_loader.get("linear", class_only=True)):
    """linear, with mitogen's connection handling mixed in."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # The results made in the controller (skips and controller actions), held until every
        # host of the task is queued: linear processes the results that are in between two hosts,
        # and a worker's never is there that soon, so one host's failure here would otherwise
        # change what the next host's task sees (ansible_play_hosts) in the same task.
        self._held_results = []
        preload_plugins()
        cache_collection_dirs()
        memoize_scan_compile()
        cache_template_compiles()
        share_template_plugins()

    def _wait_on_pending_results(self, iterator):
        """linear waits here once every host of the task is queued: the held results go on the
        results queue first, in the order their hosts were queued."""
        held, self._held_results = self._held_results, []
        for raw in held:
            self._final_q.send_task_result(raw)
        return super()._wait_on_pending_results(iterator)

    def _queue_task(self, host, task, task_vars, play_context):
        """A task whose condition is false for ``host`` gets its skipped result here (with a loop:
        controller_empty_loop, controller_skipped_loop), and an include (includes_in_controller)
        and a controller action (runs_in_controller) run here, with StrategyBase._queue_task's
        bookkeeping (the queued task cache, v2_runner_on_start, one more pending result); the
        result is held for _wait_on_pending_results. Any other task goes to a worker."""
        result = controller_skip(host, task, task_vars, play_context, self._loader)
        if result is None:
            result = controller_empty_loop(task, task_vars, self._loader)
        raw, item_callbacks = None, ()
        if result is None and (looped := controller_skipped_loop(host, task, task_vars, play_context, self._loader,
                                                                 self._variable_manager, self._final_q)):
            raw, item_callbacks = looped
        if result is None and raw is None and includes_in_controller(task) and (
                ran := run_without_node(host, task, task_vars, play_context, self._loader, self._variable_manager,
                                        self._final_q)):
            raw, item_callbacks = ran
        if result is None and raw is None and (runs_in_controller(task) or tries_controller_first(task)):
            raw = run_in_controller(host, task, task_vars, play_context, self._loader, self._variable_manager,
                                    self._final_q)
            if isinstance(raw._return_data, dict) and raw._return_data.get(NEEDS_WORKER):
                raw = None  # a controller-first action that needs the node: a worker runs it, from the start
        if result is None and raw is None:
            return super()._queue_task(host, task, task_vars, play_context)
        self._queued_task_cache[(host.name, task._uuid)] = {
            "host": host, "task": task, "task_vars": task_vars, "play_context": play_context}
        self._tqm.send_callback("v2_runner_on_start", host, task)
        for args, kwargs in item_callbacks:
            self._final_q.send_callback(*args, **kwargs)
        self._pending_results += 1
        self._held_results.append(
            raw if raw is not None else
            _RawTaskResult(host=host, task=task, return_data=result, task_fields=task.dump_attrs()))
        return None
