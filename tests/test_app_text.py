"""The answer coloured by origin, the legend and the captions (pure functions, no server)."""
import re

from app_data import PIECES, prefill, record

from app.render.explain import step_caption
from app.render.palette import LOOKS, TARGET, look
from app.render.text_view import legend_html, output_html, token_origins
from app.stages import COMMITTED, VERIFIED


def test_origins_are_the_accepted_heads_then_the_bonus_and_a_stop_cuts_them():
    assert token_origins(record(accepted=(0, 1, 3, 6))) == ["serial1", "serial2", "mlp1", TARGET]
    assert token_origins(record(accepted=(0, 1, 3, 6), new=(11, 13))) == ["serial1", "serial2"]
    assert token_origins(prefill()) == [TARGET]


def test_output_text_is_coloured_by_origin_with_hover_and_escaped():
    html = output_html([prefill(), record(accepted=(0, 2), bonus=99)], PIECES, special_ids={99}, highlight=1)
    assert html.count('class="gm-t') == 3
    assert "step 1: drafted by S1" in html and "step 1: the target&#x27;s bonus token" in html
    assert "&lt;b&gt;&amp;" in html and "gm-special" in html and "gm-new" in html
    assert look("serial1").tint in html and look(TARGET).tint in html


def test_legend_lists_each_proposer_once_in_a_fixed_order():
    html = legend_html(["mlp2", "serial1", TARGET, "serial1"])
    tags = re.findall(r'class="gm-sw"[^>]*>([^<]+)<', html)
    assert tags == ["T", "S1", "M2"]
    assert len({lk.colour for lk in LOOKS.values()}) == len(LOOKS)  # no two proposers share a colour


def test_captions_say_what_each_stage_shows():
    rec = record()
    assert "Transformer, step 1:</b> the 2-layer transformer" in step_caption(rec, "serial1", PIECES, 7)
    assert "the 1-layer transformer" in step_caption(rec, "serial1", PIECES, 7, "eagle")
    assert "MLP heads, all at once" in step_caption(rec, "parallel", PIECES, 7)
    assert "accepts 2 drafted tokens" in step_caption(rec, VERIFIED, PIECES, 7)
    assert "3 tokens" in step_caption(rec, COMMITTED, PIECES, 7)
    assert "prefill" in step_caption(prefill(), COMMITTED, PIECES, 7)


def test_the_idle_caption_follows_the_method_chosen():
    from app.render.explain import step_caption_placeholder

    assert "2-layer transformer drafts tokens 1 and 2" in step_caption_placeholder("gumiho")
    assert "1-layer transformer drafts every token" in step_caption_placeholder("eagle")
    assert "MLP heads read the target's last hidden state" in step_caption_placeholder("medusa")
    assert "plain decoding" in step_caption_placeholder("ar") and "EAGLE-2" not in step_caption_placeholder("ar")


def test_the_text_has_a_legend_of_its_own_for_the_origins_it_shows():
    html = output_html([prefill(), record()], PIECES)
    key = html.split('class="gm-out"')[0]
    assert "Underline: who wrote each token." in key
    assert re.findall(r'class="gm-sw"[^>]*>([^<]+)<', key) == ["T", "S1", "S2"]
    assert 'class="gm-sw"' not in output_html([], PIECES)  # nothing written, no key
