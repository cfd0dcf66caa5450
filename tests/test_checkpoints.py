"""Drafter checkpoints: the official layout (keys and shapes from docs/method.md, "Checkpoint layout") and our own format."""
import pytest
import torch

from gumiho_core import GumihoError
from gumiho_core.drafter import save_drafter
from gumiho_core.models import load_drafter
from tiny import random_drafter, tiny_target


def official_layout(H, I, kv, V, heads=5):  # noqa: E741 (I = intermediate size, as in docs/method.md)
    """Keys and shapes as docs/method.md lists them, written out independently of the drafter module."""
    shapes = {"embed_tokens.weight": (V, H), "fc.weight": (H, 2 * H), "fc.bias": (H,)}
    for i in (0, 1):
        p = f"layers.{i}."
        shapes.update({p + "self_attn.q_proj.weight": (H, H), p + "self_attn.o_proj.weight": (H, H),
                       p + "self_attn.k_proj.weight": (kv, H), p + "self_attn.v_proj.weight": (kv, H),
                       p + "mlp.gate_proj.weight": (I, H), p + "mlp.up_proj.weight": (I, H),
                       p + "mlp.down_proj.weight": (H, I), p + "post_attention_layernorm.weight": (H,)})
    shapes["layers.1.input_layernorm.weight"] = (H,)
    for m in range(heads):
        shapes[f"mlp.{m}.0.linear.weight"] = (H, 2 * H)
        shapes[f"mlp.{m}.0.linear.bias"] = (H,)
        for b in range(1, 6):
            shapes[f"mlp.{m}.{b}.linear.weight"] = (H, H)
            shapes[f"mlp.{m}.{b}.linear.bias"] = (H,)
    return shapes


@pytest.fixture(scope="module")
def target():
    return tiny_target(seed=0, hidden=64, heads=4, kv_heads=2)


def test_state_dict_has_the_official_keys_and_shapes(target):
    drafter = random_drafter(target)
    cfg = target.config
    want = official_layout(cfg.hidden_size, cfg.intermediate_size, 2 * 16, cfg.vocab_size)
    del want["embed_tokens.weight"]  # shared with the target, not stored
    got = {k: tuple(v.shape) for k, v in drafter.state_dict().items()}
    assert got == want


def test_official_checkpoint_round_trip(target, tmp_path, monkeypatch):
    monkeypatch.setenv("GUMIHO_DRAFTER_DTYPE", "float32")  # compare weights exactly
    cfg = target.config
    torch.manual_seed(3)
    state = {k: torch.randn(s) for k, s in official_layout(cfg.hidden_size, cfg.intermediate_size, 32,
                                                              cfg.vocab_size).items()}
    torch.save(state, tmp_path / "pytorch_model.bin")
    drafter = load_drafter(str(tmp_path), target)
    for k, v in drafter.state_dict().items():
        torch.testing.assert_close(v, state[k])
    # and ours: save, load, same weights
    save_drafter(drafter, tmp_path / "ours", dtype=torch.float32, extra={"steps": 123})
    again = load_drafter(str(tmp_path / "ours"), target)
    for k, v in again.state_dict().items():
        torch.testing.assert_close(v, state[k])
    # how long the heads were trained: ours say, the authors' layout does not, untrained heads had none
    assert (again.steps, drafter.steps, load_drafter("untrained", target).steps) == (123, None, 0)


def test_checkpoint_of_another_target_is_refused(target, tmp_path):
    other = tiny_target(seed=0, hidden=32, heads=4, kv_heads=2)
    save_drafter(random_drafter(other), tmp_path / "other")
    with pytest.raises(GumihoError, match="hidden size 32"):
        load_drafter(str(tmp_path / "other"), target)
    cfg = other.config
    state = {k: torch.zeros(s) for k, s in official_layout(cfg.hidden_size, cfg.intermediate_size, 16,
                                                             cfg.vocab_size).items()}
    torch.save(state, tmp_path / "official.bin")
    with pytest.raises(GumihoError, match="another model"):
        load_drafter(str(tmp_path / "official.bin"), target)


def test_missing_and_corrupt_checkpoints(target, tmp_path):
    with pytest.raises(GumihoError, match="does not exist"):
        load_drafter(str(tmp_path / "nope"), target)
    (tmp_path / "bad.bin").write_bytes(b"not a checkpoint")
    with pytest.raises(GumihoError, match="not a readable PyTorch checkpoint"):
        load_drafter(str(tmp_path / "bad.bin"), target)
    (tmp_path / "bad.safetensors").write_bytes(b"\x00" * 20)
    with pytest.raises(GumihoError, match="not a readable safetensors"):
        load_drafter(str(tmp_path / "bad.safetensors"), target)
    cfg = target.config
    state = {k: torch.zeros(s) for k, s in official_layout(cfg.hidden_size, cfg.intermediate_size, 32,
                                                             cfg.vocab_size).items()}
    del state["fc.bias"]
    torch.save(state, tmp_path / "partial.bin")
    with pytest.raises(GumihoError, match="missing keys"):
        load_drafter(str(tmp_path / "partial.bin"), target)
    (tmp_path / "empty").mkdir()
    with pytest.raises(GumihoError, match="neither"):
        load_drafter(str(tmp_path / "empty"), target)


def test_drafter_dtype_follows_the_device(target, monkeypatch):
    from gumiho_core.models import drafter_dtype, untrained_drafter

    monkeypatch.setenv("GUMIHO_DRAFTER_DTYPE", "bfloat16")
    assert drafter_dtype(target) == torch.bfloat16
    assert untrained_drafter(target).fc.weight.dtype == torch.bfloat16
    monkeypatch.delenv("GUMIHO_DRAFTER_DTYPE")
    assert drafter_dtype(target) in (torch.float32, torch.bfloat16)  # bf16 only where the CPU has it natively


def _folder(path, weights: bytes):
    path.mkdir()
    (path / "config.json").write_text("{}")
    (path / "model.safetensors").write_bytes(weights)
    return path


def test_a_conversion_finished_second_keeps_the_folder_another_process_put_in_place(tmp_path):
    """Two processes converting the default model at once (the app and a CLI run on a fresh machine): the one
    that finishes second must not delete the folder the first is reading (it did, and that one failed with
    "could not load target 'default'"); a half folder left by an interrupted conversion is replaced."""
    from gumiho_core.models import put_in_place

    folder = _folder(tmp_path / "model", b"first")
    reader = (folder / "model.safetensors").open("rb")
    put_in_place(_folder(tmp_path / "mine", b"second"), folder)
    assert (folder / "model.safetensors").read_bytes() == b"first" == reader.read()
    (folder / "model.safetensors").unlink()  # a half folder
    put_in_place(_folder(tmp_path / "again", b"third"), folder)
    assert (folder / "model.safetensors").read_bytes() == b"third" and not (tmp_path / "again").exists()
