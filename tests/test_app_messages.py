"""What visitors see of errors: the engine's own words without server paths, else a generic line."""
import pytest

from app.messages import public_message, scrub
from gumiho_core import GumihoError


# -- what visitors see of errors -------------------------------------------------------------------
@pytest.mark.parametrize("text,shown", [
    ("/root/.cache/gumiho/x/model.safetensors: not a readable safetensors file",
     "…/model.safetensors: not a readable safetensors file"),
    ("target path '/data/models/llama' does not exist", "target path '…/llama' does not exist"),
    ("drafter path '~/ckpt/pytorch_model.bin' does not exist", "drafter path '…/pytorch_model.bin' does not exist"),
    ("could not load target 'amd/Gumiho-vicuna-7b' (OSError)",
     "could not load target 'amd/Gumiho-vicuna-7b' (OSError)"),
    ("top_p must be a number in (0, 1]; see https://example.org/a/b", "top_p must be a number in (0, 1]; see https://example.org/a/b"),
    ("device 'cuda:0' asked for", "device 'cuda:0' asked for"),
])
def test_server_paths_never_reach_the_page(text, shown):
    assert scrub(text) == shown == scrub(shown)  # and scrubbing twice changes nothing


def test_only_gumiho_errors_speak_for_themselves():
    assert public_message(GumihoError("no drafter at /home/me/x.bin")) == "no drafter at …/x.bin"
    generic = public_message(RuntimeError("CUDA error at /usr/lib/python3/site-packages/torch/x.py:12"))
    assert "RuntimeError" in generic and "/usr" not in generic and "torch" not in generic
