"""SNOWFLAKE_TEST_ORDER=reverse runs each file's tests last to first: a test
that passes only after what an earlier one left (a node added, a setting
changed) fails then. Files stay whole, as pytest-xdist hands them out."""

import os


def pytest_collection_modifyitems(session, config, items):
    if os.environ.get("SNOWFLAKE_TEST_ORDER") != "reverse":
        return
    by_file = {}
    for item in items:
        by_file.setdefault(item.fspath, []).append(item)
    items[:] = [item for tests in by_file.values() for item in reversed(tests)]
