"""hyper.fsdp on 2 and 4 local ranks (torchrun): fsdp_ranks.py holds the cases."""

import os
import subprocess

import pytest

from conftest import HERE, Job, case_tests, torchrun

CASES = ["llama_vs_single_device", "llama_vs_fsdp2", "reshard_after_forward",
         "prefetch", "mixed_precision", "gradient_accumulation", "zero_unit_ranks", "refusals"]


job, test_case = case_tests(CASES, script="fsdp_ranks.py")


def test_rank_dying_mid_step_fails_the_others():
    """The last rank exits during backward; every other rank reports hyper.CommError (the job
    itself fails: a rank exited non-zero)."""
    dying = Job(3, ["rank_dies_mid_step"], timeout=120, script="fsdp_ranks.py")
    got = dying.results.get("rank_dies_mid_step", {})
    assert sorted(got) == [0, 1], f"reports from ranks {sorted(got)}:\n{dying.log[-3000:]}"
    for r, t in got.items():
        assert t == "ok", f"rank {r}:\n{t}"


@pytest.mark.parametrize("saved,loaded", [(4, 2), (2, 3)])
def test_checkpoint_saved_on_n_ranks_loads_on_m(tmp_path, saved, loaded):
    """A fully_shard model and its AdamW state saved on `saved` ranks load on `loaded` ranks
    with other units, and into FSDP2's layout; the C++ tool verifies the checkpoint."""
    env = {"HYPER_TEST_CKPT": str(tmp_path / "ckpt"), "HYPER_TEST_SAVED_RANKS": str(saved)}
    Job(saved, ["checkpoint_save"], extra_env=env, script="fsdp_ranks.py").check("checkpoint_save")
    tool = os.environ.get("HYPER_DCP_TOOL")
    if tool:
        p = subprocess.run([tool, "verify", str(tmp_path / "ckpt")], capture_output=True, text=True)
        assert p.returncode == 0, p.stdout + p.stderr
    Job(loaded, ["checkpoint_load"], extra_env=env, script="fsdp_ranks.py").check("checkpoint_load")


def test_hsdp_on_a_two_by_two_mesh():
    """Replicate x shard on 4 ranks against one device and FSDP2's HSDP."""
    Job(4, ["hsdp"], script="fsdp_ranks.py").check("hsdp")


def test_dp_tp_on_a_two_by_two_mesh():
    """Data parallel x tensor parallel on 4 ranks against one device, and its checkpoint
    loaded into fully_shard without tensor parallelism."""
    Job(4, ["dp_tp"], script="fsdp_ranks.py").check("dp_tp")


@pytest.mark.parametrize("nproc,tp", [(2, 1), (4, 2)])
def test_benchmark_runs(nproc, tp):
    """bench/python_fsdp.py on a tiny model (its numbers are not checked here: it checks that
    both sides' losses agree, and prints the comparison)."""
    bench = os.path.join(os.path.dirname(os.path.dirname(HERE)), "bench", "python_fsdp.py")
    args = [bench, "--vocab", "101", "--dim", "48", "--heads", "4", "--hidden", "136",
            "--layers", "1", "--seq", "16", "--steps", "1", "--rounds", "1", "--tp", str(tp)]
    code, log, timed_out = torchrun(nproc, args, 240, dict(os.environ))
    assert code == 0 and not timed_out, log[-3000:]
    assert "hyper / FSDP2: step" in log, log[-3000:]
