# pytest plugin: keep only the tests listed in the file named by env S3TESTS_SELECT_EXACT_FILE
# (one `module::test_name` per line, e.g. `test_s3::test_versioning_obj_create_read_remove`,
# optionally followed by a reason; `#` starts a comment line). Names match exactly: unlike -k,
# test_x does not also select test_x_more. A name without parameters selects every parameter
# set of the test; `test_s3::test_copy_enc[a-b-1]` selects that one.
import os


def _listed(path):
    out = set()
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                out.add(line.split()[0])
    return out


def pytest_collection_modifyitems(session, config, items):
    path = os.environ.get("S3TESTS_SELECT_EXACT_FILE")
    if not path:
        return
    wanted = _listed(path)
    keep, drop = [], []
    for it in items:
        module = it.module.__name__.rsplit(".", 1)[-1]
        base = it.name.split("[", 1)[0]
        hit = f"{module}::{it.name}" in wanted or f"{module}::{base}" in wanted
        (keep if hit else drop).append(it)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
