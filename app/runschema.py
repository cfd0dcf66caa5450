"""The app's run file: gumiho_core's RunFile (version 1: the run, its plain-decoding times) and, from version 2, the
race's other drafting lanes, each with its own tree and steps, so that a loaded file replays the whole race.

A run with no other drafting lane is written as version 1, exactly as before (any reader of version 1 reads it);
a race, as version 2. Both are read. The lanes' steps are StepFile entries, checked as the run's own are.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import BaseModel, Field

from gumiho_core import DRAFTING_METHODS, MAX_RECORDS, RUN_FILE_VERSION, RunFile, StepFile

RACE_VERSION = RUN_FILE_VERSION + 1  # a file that holds the race's other lanes
VERSIONS = (RUN_FILE_VERSION, RACE_VERSION)  # what this app reads
MAX_LANES = len(DRAFTING_METHODS) - 1  # every drafting method but the run's own
TreeShapeFile = RunFile.model_fields["tree"].annotation  # the run file's tree settings, as gumiho_core declares them


@dataclass(frozen=True)
class Limit:
    """What a list's limit counts, as a refusal names it (checks.explain reads its `name`)."""

    name: str


class LaneFile(BaseModel):
    """One of the race's other drafting lanes: its method, its tree (the run's request, in its own mode), its steps."""

    model_config = RunFile.model_config
    method: Literal[DRAFTING_METHODS]
    tree: TreeShapeFile
    records: Annotated[list[StepFile], Field(max_length=MAX_RECORDS, min_length=1), Limit("steps per run")]


class AppRunFile(RunFile):
    """RunFile, read in either version; a race's file adds its lanes and whether plain decoding ended."""

    version: Literal[VERSIONS]
    lanes: Annotated[list[LaneFile], Field(max_length=MAX_LANES), Limit("lanes per race")] = []
    baseline_done: bool | None = None  # None (version 1): plain decoding ended when the run did
    # the optimizer steps each drafting lane's heads were trained for, where known (a race's file only)
    trained_steps: dict[Literal[DRAFTING_METHODS], Annotated[int, Field(ge=0, le=10**9)]] = {}
