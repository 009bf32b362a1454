"""The engines' use of mini-racer's and dukpy's private surface is an owned decision.

Each private name the fast engines rely on is named here, and a test fails with what to do when an
upgrade moves it. A worker whose private surface moved still serves, on the library's public API
(the whole evaluator suite also runs on it: the ``engine`` fixture's "…-public" values).
V8 is loaded only in child processes, never in the test process.
"""

from __future__ import annotations

import importlib
import io
import json
import subprocess
import sys
from collections.abc import Iterator
from importlib import metadata

import pytest

from bir.core import log
from bir.evaluator import EvaluatorPool, process
from bir.evaluator.engine_quickjs import PRIVATE_SURFACE as DUKPY_SURFACE
from bir.evaluator.engine_v8 import PRIVATE_SURFACE as MINI_RACER_SURFACE

CHILD_TIMEOUT_S = 60


def _present(spec: str) -> bool:
    module_name, _, path = spec.partition(":")
    try:
        target: object = importlib.import_module(module_name)
    except ImportError:
        return False
    for part in path.split("."):
        fields = getattr(target, "__dataclass_fields__", {})
        if not hasattr(target, part) and part not in fields:
            return False
        target = getattr(target, part, None)
    return True


def _moved(library: str, spec: str, module: str) -> str:
    version = metadata.version(library)
    return (
        f"{library} {version} moved `{spec}`: update {module} (and its PRIVATE_SURFACE) "
        f"or pin {library} below {version} in pyproject.toml. Until then workers run on the slower public API."
    )


@pytest.mark.parametrize("spec", MINI_RACER_SURFACE)
def test_mini_racer_still_has_each_private_name_the_v8_engine_relies_on(spec: str) -> None:
    if not _present(spec):
        pytest.fail(_moved("mini-racer", spec, "bir.evaluator.engine_v8"))


@pytest.mark.parametrize("spec", DUKPY_SURFACE)
def test_dukpy_still_has_each_private_name_the_quickjs_engine_relies_on(spec: str) -> None:
    if not _present(spec):
        pytest.fail(_moved("dukpy", spec, "bir.evaluator.engine_quickjs"))


def _child(script: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-B", "-c", script], capture_output=True, text=True, timeout=CHILD_TIMEOUT_S, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    answer: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return answer


_RUN_ONE_JOB = """
import json, os
from bir.evaluator.wire import Job
job = Job(
    id=1, kind="paramsLogic", key="0" * 32, body="return {sum: params.a + 1}", args='[{"a": 41}]', timeout_ms=2000
)
outcome = engine.run(job)
answer = {"engine": type(engine).__name__, "fallback": engine.fallback, "ok": outcome.ok, "value": outcome.value}
print(json.dumps(answer))
os._exit(0)
"""


def test_mini_racer_s_private_surface_and_native_calls_are_all_there_in_a_worker() -> None:
    answer = _child(
        "import json, os\n"
        "from bir.evaluator.engine_v8 import init_v8, private_surface_gap\n"
        "init_v8(64)\n"
        "print(json.dumps({'gap': private_surface_gap()}))\n"
        "os._exit(0)\n"
    )
    if answer["gap"] is not None:
        pytest.fail(
            f"{answer['gap']}; update bir.evaluator.engine_v8 or pin mini-racer {metadata.version('mini-racer')}"
        )


def test_a_v8_engine_whose_private_surface_moved_runs_jobs_on_the_public_api() -> None:
    answer = _child(
        "from bir.evaluator import engine_v8, engine_v8_choice\n"
        "engine_v8.PRIVATE_SURFACE = (*engine_v8.PRIVATE_SURFACE, 'py_mini_racer._context:Context._moved_away')\n"
        "engine = engine_v8_choice.make_v8_engine(64)\n" + _RUN_ONE_JOB
    )
    assert answer["engine"] == "PublicV8Engine"
    assert "Context._moved_away" in str(answer["fallback"])
    assert answer["ok"] is True
    assert json.loads(str(answer["value"])) == {"sum": 42}


def test_a_v8_engine_with_its_private_surface_in_place_takes_the_fast_path() -> None:
    answer = _child(
        "from bir.evaluator import engine_v8_choice\nengine = engine_v8_choice.make_v8_engine(64)\n" + _RUN_ONE_JOB
    )
    assert answer["engine"] == "V8Engine"
    assert answer["fallback"] is None
    assert answer["ok"] is True


def test_a_quickjs_engine_whose_private_surface_moved_runs_jobs_on_the_public_api() -> None:
    answer = _child(
        "import dukpy, dukpy._dukpy\n"
        "del dukpy._dukpy.JSRuntimeError  # the public name, bound at import, stays\n"
        "from bir.evaluator import engine_quickjs\n"
        "engine = engine_quickjs.make_quickjs_engine(64)\n" + _RUN_ONE_JOB
    )
    assert answer["engine"] == "PublicQuickJSEngine"
    assert "JSRuntimeError" in str(answer["fallback"])
    assert answer["ok"] is True
    assert json.loads(str(answer["value"])) == {"sum": 42}


@pytest.fixture
def log_lines(monkeypatch: pytest.MonkeyPatch) -> Iterator[io.StringIO]:
    # The fallback is logged once per process: start from a process that has not logged it.
    monkeypatch.setattr(process, "_fallbacks_logged", set())
    stream = io.StringIO()
    log.set_stream(stream)
    try:
        yield stream
    finally:
        log.set_stream(None)


def _events(stream: io.StringIO, event: str) -> list[dict[str, object]]:
    lines = [json.loads(line) for line in stream.getvalue().splitlines() if line.strip()]
    return [line for line in lines if line.get("event") == event]


@pytest.mark.parametrize("engine", ["v8", "quickjs"])
@pytest.mark.anyio
async def test_a_pool_forced_onto_the_public_api_logs_the_fallback_once_and_serves(
    engine: str, log_lines: io.StringIO, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BIR_LOGIC_ENGINE_SURFACE", "public")
    async with EvaluatorPool(workers=2, timeout_ms=2000, engine=engine) as pool:
        answers = [await pool.evaluate("paramsLogic", "return {n: params.n * 2}", {"n": n}) for n in range(4)]
    assert answers == [{"n": n * 2} for n in range(4)]
    (fallback,) = _events(log_lines, "evaluator.engine_fallback")
    assert fallback["engine"] == engine
    assert "BIR_LOGIC_ENGINE_SURFACE=public" in str(fallback["why"])
    assert "public API" in str(fallback["version"])


@pytest.mark.anyio
async def test_a_pool_on_the_private_surface_logs_no_fallback(log_lines: io.StringIO) -> None:
    async with EvaluatorPool(workers=1, timeout_ms=2000, engine="v8") as pool:
        assert await pool.evaluate("paramsLogic", "return {ok: true}", {}) == {"ok": True}
    assert _events(log_lines, "evaluator.engine_fallback") == []
