"""Fixtures of the adversarial suite."""
import pytest

from attacks import make_evaluator, softmax_task


@pytest.fixture(scope="module")
def shared_eval():
    """One evaluator for a whole module: every attack must leave it able to pass the next good candidate."""
    with make_evaluator(softmax_task()) as ev:
        yield ev
