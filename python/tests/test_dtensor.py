"""hyper's Python API on 2 and 4 local ranks (torchrun): ranks.py holds the cases."""

import os
import subprocess

from conftest import Job, case_tests

CASES = ["seed_section5", "refusals_section_9_3", "ops_and_autograd", "async_redistribute",
         "python_object", "parameter_and_optimizer", "pickle_save_deepcopy", "tp_block", "torch_interop"]


job, test_case = case_tests(CASES)


def test_comm_error_instead_of_a_hang():
    Job(2, ["comm_timeout"], timeout=120).check("comm_timeout")


def test_checkpoint_saved_on_4_ranks_loads_on_2(tmp_path):
    """A checkpoint saved from Python on 4 ranks is valid for the C++ tool and loads on 2
    ranks into other layouts."""
    env = {"HYPER_TEST_CKPT": str(tmp_path / "ckpt")}
    Job(4, ["checkpoint_save"], extra_env=env).check("checkpoint_save")
    tool = os.environ.get("HYPER_DCP_TOOL")
    if tool:  # the C++ reader (set by the ctest entry)
        for d in ("ckpt", "ckpt_async"):
            p = subprocess.run([tool, "verify", str(tmp_path / d)], capture_output=True, text=True)
            assert p.returncode == 0, p.stdout + p.stderr
    Job(2, ["checkpoint_load"], extra_env=env).check("checkpoint_load")
