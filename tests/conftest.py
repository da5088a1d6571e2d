"""Shared fixtures: database URLs for SQLite and PostgreSQL, so service tests run against both.

`db_url` is parametrised over both back ends. SQLite: a fresh file per test. PostgreSQL: one fresh
database per test session on 127.0.0.1:5432 (JUDGE_TEST_PG_URL overrides the server), migrated once,
emptied before each test, dropped at the end.

The `slow` marker is given by what a test uses: any test that needs one of SLOW_FIXTURES (directly or through
another fixture) is marked here, so `pytest -m "not slow"` leaves out real builds, sandboxed children, servers,
workers and browsers without anyone marking tests by hand; modules that start such things without a fixture say
`pytestmark = pytest.mark.slow` themselves. Modules that import the trainer libraries of the [test-integrations]
extra say `pytestmark = pytest.mark.integrations`, which makes their tests slow too: the fast tier installs only
[test] (README.md), and without the trainers a run that leaves their tests out does not import those modules.
"""

from __future__ import annotations

import ast
import functools
import getpass
import importlib.util
import os
import tempfile
import uuid
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from _pytest.mark.expression import Expression  # pytest's own reading of `-m`, so the two never disagree

PG_SERVER = os.environ.get("JUDGE_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
# Workers and `serve` started by the tests (and in-process workers) build no shared precompiled headers in the
# background: minutes of g++ per flag set beside the tests' own builds. Each candidate builds the header of its
# flags on first need, as before; tests/web/test_shared_headers.py turns the background build on.
os.environ.setdefault("JUDGE_WARM_HEADERS", "off")
# Nor compile the references ahead of their baselines (service/worker/warmup.py): tens of seconds of inductor per
# worker started on fresh caches; tests/service/test_baseline_warmup.py turns it on.
os.environ.setdefault("JUDGE_WARM_BASELINES", "off")
# One inductor cache for the whole run, torch's own default place, not one per cache root: the baselines of every test
# that starts from a fresh cache root would otherwise compile the references again (~20 s each on the 2-core machine).
# tests/service/test_baseline_warmup.py unsets it to start cold.
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR",
                      str(Path(tempfile.gettempdir()) / f"torchinductor_{getpass.getuser()}"))
TABLES = ("verdicts", "job_attempts", "jobs", "submissions", "batches", "api_keys", "workers", "artifacts")
SLOW_FIXTURES = frozenset({
    "db_url",  # a freshly migrated database per test, on SQLite and on the PostgreSQL server
    "judge_root",  # the shared build and baseline caches: every user builds candidates or runs the judge's children
    "spawn", "live_api",  # real worker and API processes (tests/service/conftest.py)
    "site", "browser", "page",  # a served site and the chromium that reads it (tests/web/conftest.py)
})


PROCESS_FIXTURES = frozenset({"spawn", "live_api"})
"""Fixtures that start real API and worker processes: tests using them run on ONE of the two databases (below)."""


LONGEST_FILES = ("sandbox/test_corpus_hostile_attacks.py", "sandbox/test_corpus_hostile_registries.py",
                 "sandbox/test_corpus.py", "service/test_builders.py", "sandbox/test_registry_attacks.py",
                 "service/test_disk_full_waits.py", "sandbox/test_accelerators_differential.py",
                 "service/test_burst.py",
                 "service/test_drills.py", "sandbox/test_compile_errors.py", "sandbox/test_build_accel.py",
                 "sandbox/test_warm_children.py", "sandbox/test_shared_build_cache.py", "service/test_fake_model.py",
                 "sandbox/test_build_stalls.py", "web/test_shared_headers.py")
"""The test files that take longest (2-15 minutes each on a 2-core machine), run first: CI spreads whole files
over two processes (`-n 2 --dist loadfile`, README.md), and a long file handed out last would run alone at the
end while the other process sits idle."""


INTEGRATIONS_ONLY = ("trl", "verifiers", "transformers", "datasets", "tokenizers")
"""Packages that only the [test-integrations] extra installs (TRL and verifiers, and what they bring): a test module
importing one is marked `integrations` (tests/test_readme.py checks it)."""


@functools.cache
def _integrations_installed() -> bool:
    return all(importlib.util.find_spec(name) is not None for name in ("trl", "verifiers"))


def _marked_integrations(path: Path) -> bool:
    """The module's `pytestmark` names `integrations`, read from its text: importing it is what must not happen."""
    text = path.read_text()
    if "integrations" not in text:
        return False
    return any(isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "pytestmark" for t in node.targets)
               and "integrations" in ast.unparse(node.value) for node in ast.parse(text).body)


def _selects_integrations(config: pytest.Config) -> bool:
    """Whether the run's `-m` expression keeps a test marked `integrations` (and so `slow`)."""
    expression = config.getoption("markexpr")
    return not expression or Expression.compile(expression).evaluate(
        lambda name, **kwargs: name in ("integrations", "slow"))


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Without the [test-integrations] extra, the fast tier (`-m "not slow"`) leaves the modules that import it
    uncollected; a run that selects their tests imports them and fails on the missing package, naming it."""
    if (collection_path.suffix == ".py" and collection_path.name.startswith("test_") and not _integrations_installed()
            and _marked_integrations(collection_path) and not _selects_integrations(config)):
        return True
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if (SLOW_FIXTURES & set(getattr(item, "fixturenames", ()))
                or item.get_closest_marker("integrations") is not None):
            item.add_marker(pytest.mark.slow)
    _one_database_per_process_test(config, items)
    items.sort(key=_longest_first)  # stable: each file keeps its own order


def _longest_first(item: pytest.Item) -> int:
    path = Path(str(item.path)).as_posix()
    return next((i for i, name in enumerate(LONGEST_FILES) if path.endswith("/tests/" + name)), len(LONGEST_FILES))


def _one_database_per_process_test(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test that starts real API and worker processes runs on one database, not both: SQLite for half of them
    and PostgreSQL for the other half, chosen by a stable hash of the test's name.

    Why: these tests check the processes' pipeline (claims, signals, leases, pages served by a live API), and they
    are the suite's most expensive (a worker, an API, sandboxed children: 20-60 s each on a 2-core machine). What
    differs between the two back ends (locking, SKIP LOCKED, LISTEN/NOTIFY, dialect SQL) is tested on both by the
    `db_url` tests that call the same code in-process, and the split keeps real processes running on each. A test
    whose point is the two back ends under real processes says so with `@pytest.mark.both_databases`; one pinned
    to a back end with `parametrize("db_url", [...], indirect=True)` keeps its pin."""
    kept, dropped = [], []
    for item in items:
        callspec = getattr(item, "callspec", None)
        backend = callspec.params.get("db_url") if callspec is not None else None
        if (backend is None or not PROCESS_FIXTURES & set(getattr(item, "fixturenames", ()))
                or item.get_closest_marker("both_databases") is not None):
            kept.append(item)
            continue
        base = item.nodeid.split("[", 1)[0]
        chosen = ("sqlite", "postgresql")[zlib.crc32(base.encode()) % 2]
        (kept if backend == chosen or _pinned(item) else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def _pinned(item: pytest.Item) -> bool:
    """Parametrised over one back end only (`parametrize("db_url", ["postgresql"], indirect=True)`)."""
    return any(m.args and m.args[0] == "db_url" and len(m.args[1]) == 1 for m in item.iter_markers("parametrize"))


def _psycopg_dsn(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    import psycopg

    from service.db.migrate import upgrade

    name = f"kj_test_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    server = _psycopg_dsn(PG_SERVER)
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = PG_SERVER.rsplit("/", 1)[0] + f"/{name}"
    upgrade(url)
    yield url
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def judge_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One build cache and one baseline cache for the whole run, shared by the sandbox and service tests and,
    under pytest-xdist, by every worker: builds and baseline measurements are locked per key with flock
    (sandbox.build.compiler.build_lock, sandbox.execution.baseline), so each candidate compiles once per run, not once
    per
    fixture or per worker."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the run's directory, above each worker's own
    root = base / "judge-shared"
    root.mkdir(exist_ok=True)
    return root


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path) -> str:  # noqa: ANN001
    from service.db.migrate import upgrade

    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'judge.db'}"
        upgrade(url)
        return url
    url = request.getfixturevalue("pg_url")
    import psycopg

    with psycopg.connect(_psycopg_dsn(url), autocommit=True) as conn:
        conn.execute(f"TRUNCATE {', '.join(TABLES)} RESTART IDENTITY CASCADE")
    return url
