"""The Run form and the API's values turned into settings, with clear messages for bad ones."""
import math
import re

import pytest
from app_data import form

from app.settings import AUTO, api_settings, parse_settings, preset_name, tree_presets
from gumiho_core import DecodeConfig, GumihoError, TreeConfig


def test_form_values_become_settings():
    s = parse_settings(form(max_new_tokens=24.0), "cpu")
    assert s.decode.max_new_tokens == 24 and s.tree.total_tokens == 16 and s.preset == "small (CPU)"
    auto = parse_settings(form(preset=AUTO, top_k=None), "cpu")  # auto ignores the fields, even an empty one
    assert auto.tree is None and auto.preset == AUTO
    assert parse_settings(form(top_k=14, mlp_topk=35, pruning=35, total_tokens=64), "cpu").preset == "paper"
    assert preset_name(TreeConfig(top_k=3)) == "custom"
    assert set(tree_presets()) >= {"paper", "small (CPU)"}


@pytest.mark.parametrize("overrides,message", [
    (dict(prompt="   "), "the prompt is empty"),
    (dict(method="fast"), "method must be one of gumiho, serial, ar"),
    (dict(max_new_tokens=0), "max_new_tokens must be an integer >= 1"),
    (dict(max_new_tokens=5000), "at most 1024"),
    (dict(max_new_tokens=2.5), "max new tokens must be a whole number"),
    (dict(temperature=-1), "temperature must be a number in [0, 100]"),
    (dict(top_k=None), "top_k is empty"),
    (dict(total_tokens=1), "total_tokens must be an integer in [2, 1024]"),
    (dict(seed=math.inf), "seed must be a whole number"),
])
def test_bad_form_values_give_a_clear_message(overrides, message):
    with pytest.raises(GumihoError, match=re.escape(message)):
        parse_settings(form(**overrides), "cpu")


def test_api_settings_are_the_clis_defaults():
    s = api_settings("hi", "serial", 24, 0.0, 3)
    assert s.tree is None and s.preset == AUTO and s.decode == DecodeConfig(max_new_tokens=24, seed=3)
    paper = api_settings("hi", "serial", 24, 0.0, 3, tree="paper")
    assert paper.tree == TreeConfig() and paper.tree_source == "the authors' tree"
    with pytest.raises(GumihoError, match="tree must be one of auto, fastest, paper; got 'big'"):
        api_settings("hi", "gumiho", 24, 0.0, 3, tree="big")


@pytest.mark.parametrize("args, message", [
    (("hi", "gumiho", 24, 0.0, 2**70), "seed must be an integer in [0, 18446744073709551615] (0 to 2**64 - 1)"),
    (("hi", "gumiho", 24, 0.0, -1), "seed must be an integer in [0, 18446744073709551615]"),
    ((123, "gumiho", 24, 0.0, 0), "the prompt must be text; got int"),
    ((None, "gumiho", 24, 0.0, 0), "the prompt must be text; got NoneType"),
    ((["hi"], "gumiho", 24, 0.0, 0), "the prompt must be text; got list"),
    (("hi \ud800", "gumiho", 24, 0.0, 0), "character 3 is a lone surrogate (U+D800)"),
])
def test_bad_api_arguments_name_the_valid_range(args, message):
    """Issue #14: seed 2**70 was 'something went wrong (ValueError)', a non-string prompt 'the prompt is empty'."""
    with pytest.raises(GumihoError, match=re.escape(message)):
        api_settings(*args)
