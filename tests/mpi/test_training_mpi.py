"""Training under MultiWorkerMirroredStrategy equals one process on the same global batches."""

import pytest

import hpcdist as hd
from tests import training_cases as cases

pytestmark = pytest.mark.mpi(min_size=2)


@pytest.fixture(scope="module")
def strategy():
    return hd.MultiWorkerMirroredStrategy()


def test_fit_matches_one_process(strategy):
    cases.check_fit_matches_one_process(strategy, epochs=3)


def test_custom_loop_matches_one_process(strategy):
    cases.check_custom_loop_matches_one_process(strategy)
