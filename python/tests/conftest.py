"""Multi-rank tests: ranks.py runs its cases on every rank of a torchrun job; each pytest test
asserts one case's outcome, which every rank must report as passed."""

import json
import os
import signal
import subprocess
import sys
import tempfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


def run_job(cmd, timeout, env=None):
    """Runs the launcher command `cmd` in its own session: on a timeout the launcher and every
    process it started are killed together. Returns (exit code, combined output, whether it
    timed out)."""
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, start_new_session=True)
    try:
        log, _ = p.communicate(timeout=timeout)
        return p.returncode, log, False
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        log, _ = p.communicate()
        return p.returncode, log, True


def torchrun(nproc, args, timeout, env=None):
    """Runs `args` (a script and its arguments) on `nproc` local ranks under torchrun
    (run_job)."""
    return run_job([sys.executable, "-m", "torch.distributed.run", "--standalone",
                    f"--nproc-per-node={nproc}", *args], timeout, env)


def launch(nproc, cases, timeout=240, extra_env=None, script="ranks.py", here=HERE,
           runner=torchrun):
    """Runs `script`'s `cases` (ranks.py's by default; a path relative to `here`) on `nproc`
    local ranks, started by `runner` (a function like torchrun).
    Returns {case: {rank: result}} where result is "ok" or the failure's text; a rank that did
    not report is missing."""
    with tempfile.TemporaryDirectory() as out:
        env = dict(os.environ)
        env.update(extra_env or {})
        env["HYPER_TEST_OUT"] = out
        _, log, timed_out = runner(nproc, [os.path.join(here, script), *cases], timeout, env)
        if timed_out:
            log = f"timed out after {timeout} s\n{log}"
        results = {}
        for name in sorted(n for n in os.listdir(out) if n.endswith(".json")):
            with open(os.path.join(out, name)) as f:
                rank_results = json.load(f)
            rank = int(name.split(".")[0])
            for case, r in rank_results.items():
                results.setdefault(case, {})[rank] = r
        return results, log


class Job:
    def __init__(self, nproc, cases, **kw):
        self.nproc = nproc
        self.results, self.log = launch(nproc, cases, **kw)

    def check(self, case):
        got = self.results.get(case, {})
        missing = [r for r in range(self.nproc) if r not in got]
        failed = {r: t for r, t in got.items() if t != "ok"}
        if missing or failed:
            msg = [f"case {case} on {self.nproc} ranks:"]
            if missing:
                msg.append(f"no report from ranks {missing}; job log tail:\n{self.log[-3000:]}")
            for r, t in sorted(failed.items()):
                msg.append(f"rank {r} failed:\n{t}")
            pytest.fail("\n".join(msg))


def case_tests(cases, script="ranks.py", ranks=(2, 4), **launch_kw):
    """A test module's tests of `script`'s `cases`: one torchrun job per rank count (a
    module-scoped fixture: every case of a count runs in one job) and one test per case and
    count. At module level: `job, test_case = case_tests(CASES)`."""

    @pytest.fixture(scope="module", params=ranks, ids=lambda n: f"{n}_ranks")
    def job(request):
        return Job(request.param, cases, script=script, **launch_kw)

    @pytest.mark.parametrize("case", cases)
    def test_case(job, case):
        job.check(case)

    return job, test_case
