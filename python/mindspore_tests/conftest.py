"""The MindSpore suite's launcher: python/tests/conftest.py's multi-rank machinery (Job,
case_tests) with hyper.mindspore.run in place of torchrun. Run with the MindSpore environment's
interpreter (scripts/test.sh: .venv-ms), PYTHONPATH at the build tree's python/."""

import importlib.util
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

_spec = importlib.util.spec_from_file_location(
    "hyper_multirank", os.path.join(HERE, "..", "tests", "conftest.py"))
multirank = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(multirank)


def msrun(nproc, args, timeout, env=None):
    """Runs `args` (a script and its arguments) on `nproc` ranks under hyper.mindspore.run
    (conftest's run_job: a timeout kills the launcher, the scheduler and every rank)."""
    return multirank.run_job([sys.executable, "-m", "hyper.mindspore.run", "-n", str(nproc),
                              *args], timeout, env)


def case_tests(cases, ranks=(2, 4)):
    return multirank.case_tests(cases, script="ms_ranks.py", ranks=ranks, here=HERE,
                                runner=msrun)
