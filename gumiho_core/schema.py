"""The run file's format, declared once: every field's JSON type, range and limit, as pydantic (v2) types.

A run file comes from anyone, so its models are strict: "nan" or "1" is never a number, true is never 1, and
no field the app does not write is accepted. From these declarations come the three things that used to be
written out by hand: serialisation (`to_file`), the validator and loading (`file_model`'s `build`), and the
JSON size budget (`json_containers`). The limits are set from what the app itself writes, with headroom: the
paper tree has 64 nodes and depth 7, and the longest token of SmolLM2's vocabulary is 81 characters.

records.py declares the step itself (StepRecord's annotations are its file types); the values it holds that
other modules own (the tree, the verdict, a drafting phase) have their file models here.
"""
import math
import sys
import types
import typing
from dataclasses import MISSING, dataclass, fields
from functools import partial
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, PlainSerializer, create_model, model_validator

from .config import MAX_SEED, MAX_TREE_TOKENS, DrafterConfig
from .drafting import DraftPhase
from .tree import MLP_HEAD, PARALLEL, ROOT, SERIAL_STEP, DraftTree
from .verify import Verdict

SERIAL_STEPS = DrafterConfig.serial_steps  # the serial head's steps before the MLP heads (gumiho mode)
MAX_NEW_TOKENS = 1024  # the app's own bound on a run (the Run form's): a run is watched, step by step
MAX_TREE_DEPTH = 32  # the paper tree's depth is 7; deeper serial drafting is accepted too rarely to pay
MAX_RECORDS = MAX_NEW_TOKENS + 1  # every step commits at least one token; the prefill is step 0
MAX_TREE_NODES = MAX_TREE_TOKENS  # what the tree fields allow (the paper tree: 64)
MAX_TOKEN_ID = 10**7 - 1  # vocabularies have a few hundred thousand tokens
MAX_COUNT = 2**31 - 1  # whole numbers without a tighter bound (candidates): 32 bits
MAX_SECONDS = 1e6  # a step or a run's compute time (11 days)
MIN_LOGPROB = -1e6  # a drafter log-probability or path score (0 at most: probabilities are <= 1)
MAX_SPECIAL_IDS = 2**16
MAX_PIECE_CHARS = 1024  # one token's text (SmolLM2's longest: 81)
MAX_ANSWER_CHARS = 100_000  # the answer: `text`, and the texts of the committed tokens together
MAX_PROMPT_CHARS = 200_000  # 2,048 prompt tokens by default (--max-prompt-tokens), a few characters each
MAX_NAME_CHARS = 200  # target, device, preset, the time it was saved
MAX_NOTE_CHARS = 2_000  # a note, or where the tree came from (the auto tree's summary: ~400)
MAX_NOTES = 32
PROPOSERS = rf"^(?:{ROOT}|{SERIAL_STEP}[1-9][0-9]?|{MLP_HEAD}[1-9][0-9]?)$"  # "serial<depth>", "mlp<head>"
PHASES = rf"^(?:{PARALLEL}|{SERIAL_STEP}[1-9][0-9]?)$"  # each serial step, then all MLP heads at once


@dataclass(frozen=True)
class Limit:
    """What a list's or a text's limit counts, as a refusal names it: "at most 1024 are accepted (nodes per tree)"."""

    name: str


@dataclass(frozen=True)
class Omissible:
    """A field a file may leave out (older files did, or the app writes it only when it is known): then `default`."""

    default: object


@dataclass(frozen=True)
class Means:
    """What a value matching a pattern is, as a refusal says it: "'x' is not a proposer (…)"."""

    what: str


class FileModel(BaseModel):
    """A JSON object of the file: no unknown field, no coercion, no NaN or infinity."""

    model_config = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False, frozen=True, from_attributes=True)


def whole(lo: int, hi: int):
    return Annotated[int, Field(ge=lo, le=hi)]


def number(lo: float, hi: float, digits: int = 6):
    """A finite number in [lo, hi], written rounded to `digits` decimals (what a measurement can tell)."""
    return Annotated[float, Field(ge=lo, le=hi), PlainSerializer(partial(round, ndigits=digits))]


def text(limit: int, name: str):
    return Annotated[str, Field(max_length=limit), Limit(name)]


def listed(item, limit: int, name: str, least: int = 0):
    return Annotated[list[item], Field(max_length=limit, min_length=least), Limit(name)]


def tupled(item, limit: int, name: str, least: int = 0):
    """A dataclass field of up to `limit` items: a list in the file."""
    return Annotated[tuple[item, ...], Field(max_length=limit, min_length=least), Limit(name)]


def pattern(regex: str, what: str):
    return Annotated[str, Field(pattern=regex), Means(what)]


Token = whole(0, MAX_TOKEN_ID)
TOKEN_KEY = rf"^(?:0|[1-9][0-9]{{0,{len(str(MAX_TOKEN_ID)) - 1}}})$"  # a token id as JSON writes an int key
Name = text(MAX_NAME_CHARS, "characters per name")
Note = text(MAX_NOTE_CHARS, "characters per note")
Seconds = number(0.0, MAX_SECONDS)
LogProb = number(MIN_LOGPROB, 0.0, digits=5)
Prob = number(0.0, 1.0, digits=5) | None  # the target's probability of a node: null for one never checked
Nodes = partial(listed, limit=MAX_TREE_NODES, name="nodes per tree")


class PhaseFile(FileModel):
    name: pattern(PHASES, f"a drafting phase ({PARALLEL} or {SERIAL_STEP}1…{SERIAL_STEP}{MAX_TREE_DEPTH})")
    depths: listed(whole(1, MAX_TREE_DEPTH), MAX_TREE_DEPTH, "tree depth", least=1)
    candidates: whole(0, MAX_COUNT)
    seconds: Seconds

    def build(self) -> DraftPhase:
        return DraftPhase(self.name, tuple(self.depths), self.candidates, self.seconds)


class TreeFile(FileModel):
    tokens: Nodes(Token, least=1)
    parents: Nodes(whole(-1, MAX_TREE_NODES))
    depth: Nodes(whole(0, MAX_TREE_NODES))
    proposer: Nodes(pattern(PROPOSERS, f"a proposer ({ROOT}, {SERIAL_STEP}<depth> or {MLP_HEAD}<head>)"))
    logprob: Nodes(LogProb)
    score: Nodes(LogProb)

    def build(self) -> DraftTree:
        return DraftTree(**{name: tuple(getattr(self, name)) for name in type(self).model_fields})


class VerdictFile(FileModel):
    accepted: listed(whole(0, MAX_TREE_NODES), MAX_TREE_DEPTH + 1, "nodes per path", least=1)
    bonus: Token
    target_token: Nodes(Token)
    target_prob: Nodes(Prob)  # [] when not traced

    @model_validator(mode="before")
    @classmethod
    def _from_engine(cls, value):
        """A Verdict being written: a node verification never reached has no probability, NaN in memory and
        null in the file (JSON has no NaN)."""
        if isinstance(value, Verdict):
            probs = [None if math.isnan(p) else p for p in value.target_prob]
            return {name: getattr(value, name) for name in cls.model_fields} | {"target_prob": probs}
        return value

    def build(self) -> Verdict:
        probs = tuple(math.nan if p is None else p for p in self.target_prob)
        return Verdict(tuple(self.accepted), self.bonus, tuple(self.target_token), probs)


FILE_MODELS = {DraftTree: TreeFile, Verdict: VerdictFile, DraftPhase: PhaseFile}  # engine value -> its file model


def _file_type(tp):
    """A dataclass's field type as the file holds it: tuples are JSON lists, engine values their file models."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is Annotated:
        return Annotated[(_file_type(args[0]), *tp.__metadata__)]
    if origin is tuple and args[-1] is Ellipsis:
        return list[_file_type(args[0])]
    if origin in (typing.Union, types.UnionType):
        return typing.Union[tuple(_file_type(a) for a in args)]
    return FILE_MODELS.get(tp, tp)


def file_model(cls, name: str):
    """The strict pydantic model of dataclass `cls`, from its annotated fields (a default makes a field optional);
    its `build()` makes the `cls` value back."""
    hints = typing.get_type_hints(cls, include_extras=True)
    spec = {f.name: (_file_type(hints[f.name]), _default(hints[f.name], f.default)) for f in fields(cls)}
    return _makes(cls, create_model(name, __base__=Built, **spec))


def _default(tp, default):
    omissible = [m for m in getattr(tp, "__metadata__", ()) if isinstance(m, Omissible)]
    return omissible[0].default if omissible else ... if default is MISSING else default


def config_model(cls, name: str):
    """The file model of a settings dataclass (DecodeConfig, TreeConfig): each field of its default's JSON type,
    every field optional (an absent one takes the default); its own checks run when it is built."""
    kinds = {bool: bool, int: whole(-MAX_SEED, MAX_SEED), float: number(-sys.float_info.max, sys.float_info.max),
             str: text(MAX_NAME_CHARS, "characters per name")}
    spec = {f.name: (kinds[type(f.default)], f.default) for f in fields(cls)}
    return _makes(cls, create_model(name, __base__=Built, **spec))


_MAKES: dict[type, type] = {}  # a derived file model -> the dataclass it builds


def _makes(cls, model):
    _MAKES[model] = cls
    return model


class Built(FileModel):
    """A file model derived from a dataclass (file_model, config_model)."""

    def build(self):
        """The dataclass value this file entry holds: lists become tuples, nested file models their values."""
        return _MAKES[type(self)](**{k: _engine(getattr(self, k)) for k in type(self).model_fields})


def _engine(value):
    if isinstance(value, BaseModel):
        return value.build()
    return tuple(_engine(v) for v in value) if isinstance(value, list) else value


def to_file(model: type[BaseModel], value) -> dict:
    """`value` (a dataclass of the engine's) as JSON data of `model`: read by attribute, rounded as declared."""
    return model.model_validate(value, strict=False).model_dump(mode="json")


def json_containers(tp) -> int:
    """The most JSON lists and objects a value of type `tp` can hold, itself included (from the declared limits)."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is Annotated:
        limit = next((m.max_length for m in _metadata(tp) if hasattr(m, "max_length")), None)
        inner = args[0]
        if typing.get_origin(inner) is list:
            if limit is None:
                raise TypeError(f"a list of {typing.get_args(inner)[0]} has no declared limit")
            return 1 + limit * json_containers(typing.get_args(inner)[0])
        return json_containers(inner)
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return 1 + sum(json_containers(Annotated[(f.annotation, *f.metadata)] if f.metadata else f.annotation)
                       for f in tp.model_fields.values())
    if origin in (typing.Union, types.UnionType):
        return max(json_containers(a) for a in args)
    if origin is list:
        raise TypeError(f"a list of {args[0]} has no declared limit")
    if origin in (tuple, dict):
        return 1 + (sum(json_containers(a) for a in args) if origin is tuple else 0)
    return 0


def _metadata(tp) -> list:
    out = []
    for m in tp.__metadata__:
        out.extend(m.metadata if hasattr(m, "metadata") and not isinstance(m, (Limit, Means)) else [m])
    return out
