import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(__file__)))

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def tiny_pair(tmp_path_factory):
    """The tiny pair in the published layout, on disk: (target folder, drafter pytorch_model.bin)."""
    from tiny import published_pair

    return published_pair(tmp_path_factory.mktemp("tiny-pair"))


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models on one CPU thread: their matmuls gain nothing from more, and on a busy CPU the threads' spin-waits
    made a tiny decoding run 100x slower."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
