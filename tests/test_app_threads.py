"""The app leaves a CPU core to the browser and the server (app.set_threads)."""
import pytest
import torch

from app import backend as app_main
from gumiho_core import GumihoError


@pytest.fixture
def restore_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_threads_all_cores_but_one_unless_chosen(restore_threads, monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    cores = torch.get_num_threads()
    assert app_main.set_threads(0) == max(1, cores - 1)
    torch.set_num_threads(cores)
    assert app_main.set_threads(1) == 1


def test_omp_num_threads_is_respected(restore_threads, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    torch.set_num_threads(2)
    assert app_main.set_threads(0) == 2


def test_negative_threads_is_a_clear_error():
    with pytest.raises(GumihoError, match="--threads must be >= 0.*got -3"):
        app_main.set_threads(-3)
