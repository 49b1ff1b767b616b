"""python -m hyper.mindspore.run -n N [--timeout S] [--port P] prog.py args...

Starts MindSpore's scheduler and N worker processes of ``prog.py`` on this host with the
environment mindspore.communication.init() reads (MS_ROLE, MS_WORKER_NUM, MS_SCHED_HOST,
MS_SCHED_PORT, MS_NODE_ID; RANK / WORLD_SIZE too), prefixes each worker's output lines with
``[rank r]``, and when a worker fails (or the timeout passes) stops the others and exits
non-zero naming it. The scheduler runs no user code. MindSpore's INFO / WARNING logs are off
unless GLOG_v is set.
"""

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

_SCHEDULER = ("import mindspore as ms\n"
              "from mindspore.communication import init\n"
              "ms.set_context(device_target='CPU')\n"
              "init()\n")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pump(stream, prefix, out):
    for line in iter(stream.readline, b""):
        out.write(prefix + line.decode(errors="replace"))
        out.flush()
    stream.close()


def _stop(procs):
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + 5
    for p in procs:
        try:
            p.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m hyper.mindspore.run", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", "--nproc", type=int, required=True, help="worker processes")
    ap.add_argument("--timeout", type=float, default=0,
                    help="seconds before every rank is stopped (0: none)")
    ap.add_argument("--port", type=int, default=0, help="scheduler port (0: a free one)")
    ap.add_argument("prog")
    ap.add_argument("args", nargs=argparse.REMAINDER)
    a = ap.parse_args(argv)
    if a.nproc < 1:
        ap.error(f"-n must be at least 1, got {a.nproc}")
    port = a.port or _free_port()
    base = dict(os.environ, MS_WORKER_NUM=str(a.nproc), MS_SCHED_HOST="127.0.0.1",
                MS_SCHED_PORT=str(port), WORLD_SIZE=str(a.nproc))
    base.setdefault("GLOG_v", "3")
    sched_log = tempfile.TemporaryFile()
    sched = subprocess.Popen([sys.executable, "-c", _SCHEDULER],
                             env=dict(base, MS_ROLE="MS_SCHED", MS_NODE_ID="sched"),
                             stdout=subprocess.DEVNULL, stderr=sched_log,
                             start_new_session=True)
    workers, pumps = [], []
    for r in range(a.nproc):
        env = dict(base, MS_ROLE="MS_WORKER", MS_NODE_ID=str(r), RANK=str(r),
                   LOCAL_RANK=str(r))
        p = subprocess.Popen([sys.executable, a.prog, *a.args], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, start_new_session=True)
        workers.append(p)
        t = threading.Thread(target=_pump, args=(p.stdout, f"[rank {r}] ", sys.stdout),
                             daemon=True)
        t.start()
        pumps.append(t)
    deadline = time.monotonic() + a.timeout if a.timeout > 0 else None
    failed, why = None, ""

    def terminate(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, terminate)
    try:
        while True:
            codes = [p.poll() for p in workers]
            bad = [r for r, c in enumerate(codes) if c not in (None, 0)]
            if bad:
                failed, why = bad[0], f"exited with {codes[bad[0]]}"
                break
            if all(c == 0 for c in codes):
                break
            if sched.poll() is not None and sched.returncode != 0:
                failed, why = "scheduler", (f"the scheduler exited with {sched.returncode}; "
                                            "stopped the ranks")
                break
            if deadline is not None and time.monotonic() > deadline:
                failed, why = "timeout", (f"the timeout of {a.timeout:g} s passed; stopped "
                                          "every rank")
                break
            time.sleep(0.05)
    except KeyboardInterrupt:
        # The workers and the scheduler run in their own sessions: a terminal's Ctrl-C or a
        # SIGTERM reaches only this launcher, which stops them.
        _stop(workers + [sched])
        sys.stderr.write("hyper.mindspore.run: interrupted; stopped every rank\n")
        return 130
    if failed is not None:
        _stop(workers)
    for t in pumps:
        t.join(5)
    try:
        sched.wait(10 if failed is None else 0.5)
    except subprocess.TimeoutExpired:
        pass
    _stop([sched])
    if failed is not None:
        sched_log.seek(0)
        err = sched_log.read().decode(errors="replace")
        if isinstance(failed, int):
            why = f"rank {failed} failed: {why}; stopped the others"
        sys.stderr.write(f"hyper.mindspore.run: {why}\n")
        if failed == "scheduler" and err:
            sys.stderr.write(err[-2000:])
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
