"""The draft tree's picture: layout, stages, hover texts, node states (pure functions, no server)."""
import re

from app_data import PHASES, PIECES, TREE, prefill, record

from app.render.tree_view import BONUS_ROW, layout, node_status, short, tree_svg, visible
from app.stages import COMMITTED, VERIFIED, stages
from gumiho_core import DraftTree, StepRecord, Verdict


def test_whitespace_is_visible_and_long_tokens_are_ellipsized():
    assert visible(" a\nb\tc") == "·a↵b⇥c"
    assert visible("") == "∅" and visible("\x00") == "\\x00"
    assert short("abcdefghijklmnop", 6) == "abcde…" and short("abc", 6) == "abc"


def test_stages_follow_the_phases_then_verify_and_commit():
    assert stages(record()) == ("serial1", "serial2", "parallel", VERIFIED, COMMITTED)
    assert stages(prefill()) == (COMMITTED,)


def test_layout_puts_each_node_on_its_best_childs_row_below_the_targets_lane():
    lay = layout(TREE)
    assert lay.row[0] == lay.row[1] == lay.row[3] == lay.row[6] == lay.row[7] == BONUS_ROW + 1  # the best line
    cells = {(TREE.depth[i], lay.row[i]) for i in range(len(TREE))}
    assert len(cells) == len(TREE), "two nodes share a cell"
    assert all(r > BONUS_ROW for r in lay.row) and lay.rows == 4


def test_node_status():
    assert node_status(TREE, (0, 1, 3)) == ["accepted", "accepted", "rejected", "accepted", "rejected",
                                            "unreached", "rejected", "unreached"]


def _body(html: str) -> str:
    """The picture without its stylesheet."""
    return html.split("</style>", 1)[1]


def _tags(svg: str) -> list[str]:
    return re.findall(r'class="gm-tag"[^>]*>([^<]+)<', svg)


def test_tree_appears_phase_by_phase():
    rec = record()
    counts = {s: _tags(tree_svg(rec, PIECES, s)) for s in stages(rec)}
    assert sorted(counts["serial1"]) == ["R", "S1", "S1"]
    assert counts["serial2"].count("S2") == 3 and "M1" not in counts["serial2"]
    assert {"M1", "M2"} <= set(counts["parallel"]) and "T" not in counts["parallel"]
    assert counts[VERIFIED].count("T") == 1 and counts[COMMITTED].count("T") == 1  # the bonus node
    assert "will appear in this row" in tree_svg(rec, PIECES, "parallel")
    assert "gm-enter" in _body(tree_svg(rec, PIECES, "serial2")) and "gm-fade" in _body(tree_svg(rec, PIECES, VERIFIED))
    assert "gm-fade" not in _body(tree_svg(rec, PIECES, COMMITTED))  # the fade plays once, not on every redraw


def test_verified_tree_marks_the_path_and_tells_the_verdict_on_hover():
    svg = _body(tree_svg(record(), PIECES, VERIFIED))
    nodes = re.findall(r'<g class="gm-node ([^"]*)"', svg)
    assert [c.split()[0] for c in nodes].count("gm-accepted") == 2
    assert sum("gm-rejected" in c for c in nodes) == 3 and sum("gm-unreached" in c for c in nodes) == 2
    assert "★!" in svg  # the bonus token, marked
    assert "✓ accepted" in svg and "✗ rejected" in svg and "not checked" in svg
    assert "&lt;b&gt;&amp;" in svg and "<b>&" not in svg  # token text is escaped
    assert "nan" not in svg.lower()  # unchecked nodes have no target probability


def test_hover_before_verification_does_not_give_the_answer_away():
    svg = tree_svg(record(), PIECES, "parallel")
    assert "accepted" not in svg and "rejected" not in svg and "draft probability" in svg


def test_a_64_node_tree_fits_a_wide_panel():
    n, tokens, parents, depth, proposer = 64, [0], [-1], [0], ["root"]
    for i in range(1, n):  # a chain of 7 and many siblings: the widest shape a Gumiho tree can take
        parent = i - 1 if i <= 7 else (i - 8) % 7
        tokens.append(i)
        parents.append(parent)
        depth.append(depth[parent] + 1)
        proposer.append(["serial1", "serial2", "mlp1", "mlp2", "mlp3", "mlp4", "mlp5"][depth[-1] - 1])
    scores = tuple(-0.1 * d - 0.01 * i for i, d in enumerate(depth))
    tree = DraftTree(tuple(tokens), tuple(parents), tuple(depth), tuple(proposer), scores, scores)
    verdict = Verdict(tuple(range(8)), 5, tuple([1] * n), tuple([0.5] * n))
    rec = StepRecord(1, "speculative", tree, PHASES, verdict, (1, 2, 3, 4, 5, 6, 7, 5), 0, 0, 0, 9, 1, 1, False, None)
    svg = tree_svg(rec, {}, COMMITTED)
    width = int(re.search(r'width="(\d+)"', svg.split("<svg", 1)[1]).group(1))
    assert width <= 1100 and len(re.findall(r'<g class="gm-node', svg)) == n + 1  # the bonus too


def test_prefill_and_plain_steps_draw_one_target_token():
    svg = tree_svg(prefill(), PIECES)
    assert _tags(svg) == ["R", "T"] and "★·and" in svg
