"""`@pytest.mark.default_case(id, ...)`: a pytest plugin (registered by tests/conftest.py)."""

import pytest


# --- `@pytest.mark.default_case(id, ...)`: a parametrized test whose cases cost seconds each
# runs the named cases (its first case when none is named) in the default run; its other
# cases are `slow` (`pytest -m slow` runs them). The default run keeps every test function,
# each on the case that exercises its code most cheaply; the slow run keeps every case.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    cases: dict[str, list[str]] = {}
    wanted: dict[str, tuple[str, ...]] = {}
    for item in items:
        marker = item.get_closest_marker("default_case")
        callspec = getattr(item, "callspec", None)
        if marker is None or callspec is None:
            continue
        function = item.nodeid.split("[", 1)[0]
        cases.setdefault(function, []).append(callspec.id)
        wanted[function] = tuple(marker.args) or (cases[function][0],)
        if callspec.id not in wanted[function]:
            item.add_marker(pytest.mark.slow)
    # A name that matches no case would silently drop the test from the default run.
    for function, ids in wanted.items():
        if unknown := set(ids) - set(cases[function]):
            raise pytest.UsageError(f"{function}: default_case {sorted(unknown)} names no case")
