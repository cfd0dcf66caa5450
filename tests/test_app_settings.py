"""The Run form and the API's values turned into requests, with clear messages for bad ones; the page's trees are
the engine's (gumiho_core.resolve_tree), classroom by default."""
import math
import re

import pytest
from app_data import form

from app.settings import (CUSTOM, DEFAULT_PRESET, PRESET_MENU, api_settings, check_race, parse_request, preset_fields,
                          preset_name)
from gumiho_core import CLASSROOM, SMALL, TREE_PRESETS, DecodeConfig, GumihoError, TreeConfig


def test_form_values_become_a_request():
    r = parse_request(form(max_new_tokens=24.0))
    assert r.decode.max_new_tokens == 24 and r.tree == CUSTOM and r.shape.total_tokens == 16 and r.race is None
    auto = parse_request(form(preset="auto", top_k=None))  # a named request ignores the fields, even an empty one
    assert auto.tree == "auto" and auto.shape is None
    assert parse_request(form(preset="small (CPU)")).tree == SMALL  # the old name, as API callers send it
    assert preset_name(TreeConfig(top_k=14, mlp_topk=35, pruning=35, total_tokens=64)) == "paper"
    assert preset_name(TreeConfig(top_k=3)) == "custom"
    assert DEFAULT_PRESET == CLASSROOM == PRESET_MENU[0] and preset_fields(CLASSROOM) == TREE_PRESETS[CLASSROOM]


def test_the_race_is_the_other_drafting_methods_in_registry_order():
    assert parse_request(form(), ["ar", "medusa", "gumiho", "serial", "eagle"]).race == (
        "eagle", "medusa", "gumiho-serial")  # the run's own and plain decoding race anyway; "serial" is an alias
    assert check_race("eagle", ["gumiho", "eagle"]) == ("gumiho",)
    with pytest.raises(GumihoError, match="method must be one of"):
        check_race("gumiho", ["hydra"])
    with pytest.raises(GumihoError, match="the race must be a list of method names"):
        parse_request(form(), "eagle")


@pytest.mark.parametrize("overrides,message", [
    (dict(prompt="   "), "the prompt is empty"),
    (dict(method="fast"), "method must be one of gumiho, eagle, medusa, gumiho-serial, ar"),
    (dict(max_new_tokens=0), "max_new_tokens must be an integer >= 1"),
    (dict(max_new_tokens=5000), "at most 1024"),
    (dict(max_new_tokens=2.5), "max new tokens must be a whole number"),
    (dict(temperature=-1), "temperature must be a number in [0, 100]"),
    (dict(top_k=None), "top_k is empty"),
    (dict(total_tokens=1), "total_tokens must be an integer in [2, 1024]"),
    (dict(seed=math.inf), "seed must be a whole number"),
    (dict(preset="huge"), "tree preset must be one of classroom, fastest, auto, paper, small, custom"),
])
def test_bad_form_values_give_a_clear_message(overrides, message):
    with pytest.raises(GumihoError, match=re.escape(message)):
        parse_request(form(**overrides))


def test_api_settingss_are_the_clis_defaults():
    r = api_settings("hi", "serial", 24, 0.0, 3)
    assert r.tree == "auto" and r.method == "gumiho-serial" and r.decode == DecodeConfig(max_new_tokens=24, seed=3)
    assert api_settings("hi", "gumiho", 24, 0.0, 3, tree="classroom").tree == "classroom"
    with pytest.raises(GumihoError, match="tree must be one of auto, fastest, paper, classroom, small; got 'big'"):
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
