"""Which draft tree a run uses: one function (resolve_tree) for the CLI, the bench and the app.

A request names a preset ("paper", "classroom", "small"), or asks for this device's measured tree ("auto",
"fastest": measure/autotree.py), or gives the shape outright. Resolving never measures: the caller passes the
measurement it has (cached, or just taken), and without one "auto" and "fastest" fall back to a stated preset.
docs/cli.md, "The draft tree", says when to pick which.
"""
from __future__ import annotations

from dataclasses import dataclass

from .config import TREE_FIELDS, TreeConfig
from .errors import GumihoError
from .methods import method

AUTO, FASTEST, CUSTOM = "auto", "fastest", "custom"
PAPER, CLASSROOM, SMALL = "paper", "classroom", "small"
MEASURED = (AUTO, FASTEST)  # the requests a measurement of this device answers

PRESETS = {
    # The authors' tree: 64 nodes verified per step. On a GPU a 64-token pass costs about what one token does.
    PAPER: TreeConfig(),
    # Deep enough for every head, small enough to read: 3 candidates per level, 22 nodes, 7 levels. A hybrid tree
    # of this shape holds every node it pooled, so S1, S2 and M1-M5 all show in every step.
    CLASSROOM: TreeConfig(top_k=3, mlp_topk=3, pruning=3, total_tokens=22, depth=7),
    # A small tree for a CPU, where verifying each extra token costs time: auto's stand-in until it is measured.
    SMALL: TreeConfig(top_k=6, mlp_topk=6, pruning=8, total_tokens=16),
}
TREE_REQUESTS = (*MEASURED, *PRESETS)
_SAID = {PAPER: "the authors' tree", CLASSROOM: "the classroom tree", SMALL: "the small tree"}


@dataclass(frozen=True)
class ResolvedTree:
    tree: TreeConfig  # in the method's drafting mode
    preset: str  # what was asked for and got: a request name, CUSTOM, or "auto → small" for a stand-in
    source: str  # where it came from, in a sentence the CLI and the page show as is


def fallback(device: str) -> str:
    """What auto and fastest use until this device is measured: the authors' tree on a GPU, a small one on a CPU."""
    return PAPER if str(device).startswith("cuda") else SMALL


def preset_of(tree: TreeConfig) -> str:
    """The preset whose shape `tree` has (its mode aside), or CUSTOM."""
    shape = {k: getattr(tree, k) for k in (*TREE_FIELDS, "pool")}
    return next((name for name, cfg in PRESETS.items()
                 if shape == {k: getattr(cfg, k) for k in (*TREE_FIELDS, "pool")}), CUSTOM)


def resolve_tree(request: str, method_name: str, device: str, choice=None, shape: TreeConfig | None = None,
                 unmeasured: str = "") -> ResolvedTree:
    """The tree of `request` for `method_name` on `device`.

    shape: an explicit tree (the CLI's shape flags, the page's custom fields): it wins over the request.
    choice: this device's measurement for the method's drafter and mode (a TreeChoice), or None.
    unmeasured: why there is no measurement, said where auto or fastest falls back.
    """
    mode = method(method_name).mode
    if mode is None:
        raise GumihoError(f"method {method_name!r} drafts no tree")
    if shape is not None:
        name = preset_of(shape)
        return ResolvedTree(shape.with_(mode=mode), name, _SAID.get(name, "an explicit tree shape"))
    if request in PRESETS:
        return ResolvedTree(PRESETS[request].with_(mode=mode), request, _SAID[request])
    if request not in MEASURED:
        raise GumihoError(f"tree must be one of {', '.join(TREE_REQUESTS)}; got {request!r}")
    if choice is not None:
        if request == FASTEST:
            return ResolvedTree(choice.fastest_tree.with_(mode=mode), FASTEST, choice.fastest_summary())
        return ResolvedTree(choice.tree.with_(mode=mode), AUTO, choice.summary())
    name = fallback(device)
    why = f" ({unmeasured})" if unmeasured else ""
    return ResolvedTree(PRESETS[name].with_(mode=mode), f"{request} → {name}",
                        f"{_SAID[name]}: this device is not measured for {method_name} yet{why}")
