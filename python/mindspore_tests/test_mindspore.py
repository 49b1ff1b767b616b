"""hyper.mindspore on 2 and 4 ranks (CPU): ms_ranks.py's cases under hyper.mindspore.run, and the
launcher's own behaviour. Needs the MindSpore environment (scripts/deps.sh makes .venv-ms):
without mindspore this module fails at import, it does not skip."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import mindspore  # noqa: F401  (a missing wheel fails the suite here)

from conftest import HERE, case_tests, msrun, multirank

CASES = ["seed_section5", "redistribute_catalogue_1d", "redistribute_catalogue_2d", "large_moves", "dtypes",
         "partial", "zero_unit_ranks", "autograd", "elementwise", "refusals_section_9_3",
         "collectives", "bytes", "checkpoint", "graph_mode", "cross_rank_errors"]

job, test_case = case_tests(CASES)


def _torchrun(nproc, args):
    torch_python = os.environ.get("HYPER_TORCH_PYTHON", "")
    assert os.path.exists(torch_python), (
        f"HYPER_TORCH_PYTHON={torch_python!r} is not the torch environment's interpreter (ctest "
        "sets it; bash scripts/deps.sh makes .venv)")
    return multirank.run_job([torch_python, "-m", "torch.distributed.run", "--standalone",
                              f"--nproc-per-node={nproc}", os.path.join(HERE, "torch_side.py"),
                              *args], 300, dict(os.environ))


def test_checkpoint_across_frameworks(tmp_path):
    """hyper on PyTorch saves on 4 ranks; hyper.mindspore loads it on 2 ranks into other layouts
    (and reads the files with the reference safetensors reader), saves new values with other
    layouts; hyper on PyTorch loads those on 3 ranks. Values checked on every rank."""
    from_torch, from_ms = str(tmp_path / "from_torch"), str(tmp_path / "from_mindspore")
    code, log, timed_out = _torchrun(4, ["save", from_torch])
    assert code == 0 and not timed_out, log[-3000:]
    job = multirank.Job(2, ["checkpoint_from_torch"], script="ms_ranks.py", here=HERE,
                        runner=msrun, extra_env={"HYPER_CKPT_IN": from_torch,
                                                 "HYPER_CKPT_OUT": from_ms})
    job.check("checkpoint_from_torch")
    code, log, timed_out = _torchrun(3, ["check", from_ms])
    assert code == 0 and not timed_out, log[-3000:]
    assert log.count("generation 1 checked") == 3, log[-3000:]


def _script(tmp_path, body):
    p = tmp_path / "prog.py"
    p.write_text(textwrap.dedent(body))
    return str(p)


def test_launcher_stops_the_others_when_a_rank_fails(tmp_path):
    prog = _script(tmp_path, """
        import os, time
        import hyper.mindspore as hm
        hm.init_device_mesh("cpu", (int(os.environ["WORLD_SIZE"]),))
        if os.environ["RANK"] == "1":
            raise SystemExit(3)
        time.sleep(120)   # the others would wait for rank 1 forever
    """)
    t = time.monotonic()
    code, log, timed_out = msrun(3, [prog], timeout=100, env=dict(os.environ))
    assert not timed_out and code == 1, log[-2000:]
    assert "rank 1 failed: exited with 3; stopped the others" in log, log[-2000:]
    assert time.monotonic() - t < 60


def test_launcher_timeout(tmp_path):
    prog = _script(tmp_path, "import time\ntime.sleep(120)\n")
    code, out = _run_launcher(["-n", "2", "--timeout", "3", prog])
    assert code == 1 and "the timeout of 3 s passed; stopped every rank" in out, out[-2000:]


def test_launcher_sigterm_stops_every_rank(tmp_path):
    prog = _script(tmp_path, f"""
        import os, time
        open(os.path.join({str(tmp_path)!r}, "pid" + os.environ["RANK"]), "w").write(str(os.getpid()))
        time.sleep(120)
    """)
    p = subprocess.Popen([sys.executable, "-m", "hyper.mindspore.run", "-n", "2", prog],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 60
    while len(list(tmp_path.glob("pid*"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    pids = [int(f.read_text()) for f in tmp_path.glob("pid*")]
    assert len(pids) == 2, p.stdout.read() if p.poll() is not None else "ranks did not start"
    p.send_signal(signal.SIGTERM)
    out, _ = p.communicate(timeout=30)
    assert p.returncode == 130 and "interrupted; stopped every rank" in out, out[-2000:]
    for pid in pids:
        try:
            os.kill(pid, 0)
            alive = not open(f"/proc/{pid}/stat").read().split()[2] == "Z"
        except (ProcessLookupError, FileNotFoundError):
            alive = False
        assert not alive, f"rank process {pid} still runs"


def test_launcher_prefixes_output(tmp_path):
    prog = _script(tmp_path, "import os\nprint('hello from', os.environ['RANK'])\n")
    code, out = _run_launcher(["-n", "2", prog])
    assert code == 0, out
    assert "[rank 0] hello from 0" in out and "[rank 1] hello from 1" in out, out


def _run_launcher(args):
    p = subprocess.run([sys.executable, "-m", "hyper.mindspore.run", *args], capture_output=True,
                       text=True, timeout=60)
    return p.returncode, p.stdout + p.stderr
