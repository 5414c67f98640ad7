"""House rules from DESIGN §2 that a test can hold: light entry points, arrows pointing down."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "stash_pipeline"
HEAVY = ("torch", "transformers", "datasets")


def test_entry_points_never_import_torch():
    """The CLI, the Dagster definitions and the HTTP API (its app and every route) load no torch;
    nor does the worker's runner before it has read a job's settings (worker/procedures.py does)."""
    code = (
        "import sys\n"
        "import stash_pipeline.definitions, stash_pipeline.cli, stash_pipeline.store\n"
        "import stash_pipeline.worker.runner\n"
        "from stash_pipeline.cli import build_parser; build_parser()\n"
        "from stash_pipeline.api import create_app; create_app().openapi()\n"
        f"heavy = [m for m in {HEAVY!r} if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def imports_of(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_only_the_worker_imports_the_ml_stack():
    offenders = [
        str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py")
        if "worker" not in path.relative_to(PACKAGE).parts
        and any(name.split(".")[0] in HEAVY for name in imports_of(path))
    ]
    assert offenders == []


def test_core_imports_nothing_of_the_project_but_core():
    offenders = [
        f"{path.relative_to(PACKAGE)}: {name}"
        for path in (PACKAGE / "core").rglob("*.py")
        for name in imports_of(path)
        if name.startswith("stash_pipeline") and not name.startswith("stash_pipeline.core")
    ]
    assert offenders == []


def test_the_worker_imports_only_core_and_the_job_contract_and_log():
    """The worker runs in its own process (locally or on Modal): no store, Dagster or extraction."""
    offenders = [
        f"{path.relative_to(PACKAGE)}: {name}"
        for path in (PACKAGE / "worker").rglob("*.py")
        for name in imports_of(path)
        if name.startswith("stash_pipeline")
        and not name.startswith(("stash_pipeline.core", "stash_pipeline.worker"))
        and name not in ("stash_pipeline.compute.contract", "stash_pipeline.compute.worker_log")
        and name != "stash_pipeline.compute"
    ]
    assert offenders == []



def test_the_two_http_apps_stand_on_web_and_not_on_each_other():
    """``serving/`` (the scoring server) never imports ``api/``; ``web/``, which both stand on
    (body limits, error shape, request ids, typed errors), imports neither; and the API reaches
    the scoring server only through its client and protocol (no torch)."""
    def offenders(folder: str, banned: tuple[str, ...]) -> list[str]:
        return [f"{path.relative_to(PACKAGE)}: {name}"
                for path in (PACKAGE / folder).rglob("*.py")
                for name in imports_of(path) if name.startswith(banned)]

    assert offenders("serving", ("stash_pipeline.api",)) == []
    assert offenders("web", ("stash_pipeline.api", "stash_pipeline.serving",
                             "stash_pipeline.worker")) == []
    reached = {name for path in (PACKAGE / "api").rglob("*.py") for name in imports_of(path)
               if name.startswith("stash_pipeline.serving")}
    assert reached <= {"stash_pipeline.serving.client", "stash_pipeline.serving.protocol"}


def test_the_cli_reaches_the_pipeline_through_one_module():
    """The commands reach the definitions through ``cli/pipeline.py`` only, and the Dagster
    instance through the door ``stash_pipeline.dagster_runs`` (both import Dagster when called:
    ``--help`` pays for none)."""
    pipeline = ("stash_pipeline.defs", "stash_pipeline.dagster_runs.", "stash_pipeline.definitions",
                "dagster")
    offenders = [
        f"{path.relative_to(PACKAGE)}: {name}"
        for path in (PACKAGE / "cli").rglob("*.py") if path.name != "pipeline.py"
        for name in imports_of(path) if name.startswith(pipeline)
    ]
    assert offenders == []


def test_the_api_and_the_cli_reach_the_instance_through_one_door():
    """``dagster_runs/`` (the instance, run state, ``--wait`` runs) is entered by the API, the
    viewer and the CLI through its package only, never a module of it; the API imports no Dagster
    and no definitions of its own; and the door imports no Dagster when imported."""
    api_offenders = [
        f"{path.relative_to(PACKAGE)}: {name}" for path in (PACKAGE / "api").rglob("*.py")
        for name in imports_of(path)
        if name.startswith(("stash_pipeline.defs", "stash_pipeline.definitions", "dagster"))
    ]
    assert api_offenders == []
    graph = module_imports()  # names `from stash_pipeline.dagster_runs import run_state` too
    past_the_door = [
        f"{module}: {name}" for module in sorted(graph)
        if module.startswith(("stash_pipeline.api", "stash_pipeline.cli"))
        for name in sorted(graph[module]) if name.startswith("stash_pipeline.dagster_runs.")
    ]
    assert past_the_door == []
    code = ("import sys\n"
            "import stash_pipeline.dagster_runs\n"
            "loaded = [m for m in sys.modules if m.split('.')[0] == 'dagster'"
            " or m.startswith('stash_pipeline.dagster_runs.')]\n"
            "assert not loaded, loaded\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_instance_door_stands_above_defs_and_below_the_api_and_the_cli():
    """``dagster_runs/`` imports ``defs/`` and what lies below, never ``api/``, ``cli/``,
    ``services/`` or the HTTP apps; nothing below it (``defs/``, ``pipelines/``, ``services/``,
    ``compute/``, ``store/``, ``core/``...) imports it."""
    above = ("stash_pipeline.api", "stash_pipeline.cli", "stash_pipeline.services",
             "stash_pipeline.serving", "stash_pipeline.web")
    upward = [
        f"{path.relative_to(PACKAGE)}: {name}"
        for path in (PACKAGE / "dagster_runs").rglob("*.py")
        for name in imports_of(path) if name.startswith(above)
    ]
    assert upward == []
    callers = ("api", "cli", "dagster_runs")
    below = [
        f"{path.relative_to(PACKAGE)}: {name}"
        for path in PACKAGE.rglob("*.py") if path.relative_to(PACKAGE).parts[0] not in callers
        for name in imports_of(path) if name.startswith("stash_pipeline.dagster_runs")
    ]
    assert below == []


def test_the_pipelines_steps_are_dagster_free():
    """``pipelines/`` holds the steps the defs/ assets call (and the pair assembler): defs/ may
    import it, it imports no Dagster, no defs/ and none of what the CLI and the API do
    (``services/``, ``api/``, ``cli/``, ``dagster_runs/``), directly or through what it imports."""
    above = ("stash_pipeline.defs", "stash_pipeline.services", "stash_pipeline.api",
             "stash_pipeline.cli", "stash_pipeline.dagster_runs", "stash_pipeline.definitions")
    offenders = [
        f"{path.relative_to(PACKAGE)}: {name}"
        for path in (PACKAGE / "pipelines").rglob("*.py")
        for name in imports_of(path)
        if name.split(".")[0] in ("dagster", "dagster_pipes") or name.startswith("dagster_")
        or name.startswith(above)
    ]
    assert offenders == []
    modules = sorted(f"stash_pipeline.pipelines.{path.stem}"
                     for path in (PACKAGE / "pipelines").glob("*.py") if path.stem != "__init__")
    code = (
        "import sys\n"
        + "".join(f"import {module}\n" for module in modules)
        + "loaded = [m for m in sys.modules if m.split('.')[0] == 'dagster'"
        f" or m.startswith({above!r})]\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def module_imports() -> dict[str, set[str]]:
    """{module: the package's modules it imports, lazily or not}; a module's own enclosing
    packages are left out (a package's ``__init__`` re-exporting its modules is no circle)."""
    def name_of(path: Path) -> str:
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)

    paths = {name_of(path): path for path in PACKAGE.rglob("*.py")}
    graph = {}
    for module, path in paths.items():
        named = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                named.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                named.add(node.module)
                named.update(f"{node.module}.{alias.name}" for alias in node.names)
        graph[module] = {n for n in named
                         if n in paths and n != module and not module.startswith(n + ".")}
    return graph


def test_no_import_circle():
    """No module reaches itself through the modules it imports."""
    graph = module_imports()
    circles = []
    for start in graph:
        seen, todo = set(), list(graph[start])
        while todo:
            module = todo.pop()
            if module == start:
                circles.append(start)
                break
            if module not in seen:
                seen.add(module)
                todo.extend(graph[module])
    assert circles == []


def test_no_viewer_page_module_imports_another():
    """The viewer's pages stand on its frame (``api/ui/frame.py``: templates, sessions, forms,
    error pages) and on what they show alike (``views``, ``trace_list``, ``progress``); a page
    module (one router of pages, ``*_pages.py``) imports no other page module, and nothing below
    the pages imports one."""
    ui = PACKAGE / "api" / "ui"
    page_modules = {f"stash_pipeline.api.ui.{path.stem}" for path in ui.glob("*_pages.py")}
    assert {"stash_pipeline.api.ui.login_pages", "stash_pipeline.api.ui.trace_pages",
            "stash_pipeline.api.ui.model_pages",
            "stash_pipeline.api.ui.progress_pages"} <= page_modules
    graph = module_imports()
    offenders = [
        f"{module}: {name}"
        for module in sorted(graph) if module.startswith("stash_pipeline.api.ui.")
        for name in sorted(graph[module]) if name in page_modules
    ]
    assert offenders == []


def test_only_the_job_contract_deletes_directories():
    """``write_job`` clears a job directory (keeping attempt-logs/), ``remove_job`` discards one:
    no caller deletes a job directory its own way."""
    offenders = [
        str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py")
        if path != PACKAGE / "compute" / "contract.py" and "rmtree" in path.read_text()
    ]
    assert offenders == []


@pytest.mark.parametrize("name", ["runner.py", "procedures.py"])
def test_the_worker_runner_only_conducts(name):
    """A job's inputs are read in worker/inputs.py, its outputs written in outputs.py and
    checkpoint.py (the one writer and loader of a checkpoint): runner.py and procedures.py touch no
    file themselves."""
    conductor = PACKAGE / "worker" / name
    text = conductor.read_text()
    file_access = [call for call in ("read_text(", "write_text(", "open(", "json.load",
                                     "save_pretrained(", "save_to_disk(", "load_from_disk(")
                   if call in text]
    assert file_access == [] and "datasets" not in imports_of(conductor)
