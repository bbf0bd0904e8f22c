"""`@pytest.mark.hosts("messy")`: the test runs on those hosts of the scenario only (testinfra otherwise runs
every test on every host). A pytest plugin of every scenario's verifier (PYTEST_PLUGINS in
.config/molecule/config.yml)."""


def pytest_configure(config):
    config.addinivalue_line("markers", "hosts(*names): run the test on these inventory hosts only")


def pytest_collection_modifyitems(config, items):
    keep, drop = [], []
    for item in items:
        mark = item.get_closest_marker("hosts")
        callspec = getattr(item, "callspec", None)
        here = callspec.id.rsplit("://", 1)[-1] if callspec else None
        (drop if mark and here not in mark.args else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
