"""Bad input: a one-line GumihoError naming the value and what is allowed; never a torch traceback."""
import pytest
from transformers import GPT2Config, GPT2LMHeadModel

from gumiho_core import DecodeConfig, GumihoError, TreeConfig, start
from gumiho_core.drafter import DrafterConfig, GumihoDrafter
from gumiho_core.target import Target
from tiny import random_drafter, tiny_target


@pytest.fixture(scope="module")
def target():
    return tiny_target(seed=0, max_len=64)


@pytest.fixture(scope="module")
def drafter(target):
    return random_drafter(target)


@pytest.mark.parametrize("kwargs,match", [
    ({"max_new_tokens": 0}, "max_new_tokens must be an integer >= 1; got 0"),
    ({"max_new_tokens": 2.5}, "max_new_tokens"),
    ({"temperature": -0.5}, "temperature must be a number in \\[0, 100\\].*got -0.5"),
    ({"top_p": 0}, "top_p must be a number in \\(0, 1\\]; got 0"),
    ({"seed": -1}, "seed must be an integer in \\[0, 18446744073709551615\\] \\(0 to 2\\*\\*64 - 1\\); got -1"),
    ({"seed": 2**70}, "seed must be an integer in \\[0, 18446744073709551615\\].*got 1180591620717411303424"),
])
def test_decode_config(kwargs, match):
    with pytest.raises(GumihoError, match=match):
        DecodeConfig(**kwargs)


@pytest.mark.parametrize("kwargs,match", [
    ({"top_k": 0}, "top_k must be an integer >= 1; got 0"),
    ({"total_tokens": 1}, "total_tokens must be an integer in \\[2, 1024\\].*got 1"),
    ({"depth": 0}, "depth must be an integer >= 1; got 0"),
    ({"mode": "medusa"}, "tree mode must be one of hybrid, serial; got 'medusa'"),
])
def test_tree_config(kwargs, match):
    with pytest.raises(GumihoError, match=match):
        TreeConfig(**kwargs)


def test_prompts(target, drafter):
    with pytest.raises(GumihoError, match="prompt is empty"):
        start("gumiho", target, [], drafter=drafter)
    with pytest.raises(GumihoError, match="prompt has 64 tokens; this model's context holds 64"):
        start("ar", target, [1] * 64)
    with pytest.raises(GumihoError, match="token id 97 is outside the vocabulary \\[0, 97\\)"):
        start("ar", target, [1, 97])


def test_tree_against_model(target, drafter):
    with pytest.raises(GumihoError, match="total_tokens 100 exceeds the context length 64"):
        start("gumiho", target, [1, 2], tree=TreeConfig(total_tokens=100), drafter=drafter)
    with pytest.raises(GumihoError, match="top_k 200 exceeds the draft vocabulary size 97"):
        start("gumiho", target, [1, 2], tree=TreeConfig(top_k=200), drafter=drafter)
    with pytest.raises(GumihoError, match="depth 8 needs more heads than this drafter has: at most 7"):
        start("gumiho", target, [1, 2], tree=TreeConfig(depth=8), drafter=drafter)
    with pytest.raises(GumihoError, match="method 'beam' must be one of|method must be one of"):
        start("beam", target, [1, 2], drafter=drafter)
    with pytest.raises(GumihoError, match="needs a drafter"):
        start("gumiho", target, [1, 2])


def test_finished_session_refuses_more_steps(target):
    session = start("ar", target, [1, 2], DecodeConfig(max_new_tokens=1))
    session.step()
    with pytest.raises(GumihoError, match="finished"):
        session.step()


def test_mismatched_drafter(target):
    other = tiny_target(seed=1, hidden=32)
    with pytest.raises(GumihoError,
                       match="drafter has hidden size 32 and vocabulary 97, the target has hidden size 64"):
        GumihoDrafter(DrafterConfig.from_target(other.config), target.shared_weights())


def test_unsupported_architecture():
    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=50))
    with pytest.raises(GumihoError, match="unsupported architecture 'gpt2': supported are llama"):
        Target(model)
