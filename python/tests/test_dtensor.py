"""hyper's Python API on 2 and 4 local ranks (torchrun): ranks.py holds the cases."""

import pytest

from conftest import Job

CASES = ["seed_section5", "refusals_section_9_3", "ops_and_autograd", "async_redistribute",
         "python_object", "parameter_and_optimizer"]


@pytest.fixture(scope="module")
def two_ranks():
    return Job(2, CASES)


@pytest.fixture(scope="module")
def four_ranks():
    return Job(4, CASES)


@pytest.mark.parametrize("case", CASES)
def test_two_ranks(two_ranks, case):
    two_ranks.check(case)


@pytest.mark.parametrize("case", CASES)
def test_four_ranks(four_ranks, case):
    four_ranks.check(case)


def test_comm_error_instead_of_a_hang():
    Job(2, ["comm_timeout"], timeout=120).check("comm_timeout")
