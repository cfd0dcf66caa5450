"""The run file's schema (gumiho_core/schema.py, records.py): serialising, validating and loading a step are all
derived from StepRecord's own annotations, so a new field is declared in one place and the rest follows."""
import json
import math
from dataclasses import dataclass, fields
from typing import Annotated

import pytest
from app_data import make_run
from pydantic import ValidationError, create_model

from app import runfile
from app.checks import explain
from app.limits import MAX_JSON_CONTAINERS
from gumiho_core import MAX_RECORDS, MAX_TREE_DEPTH, RunFile, StepFile, StepRecord, json_containers
from gumiho_core.schema import Omissible, file_model, listed, number, to_file, tupled, whole


@dataclass(frozen=True)
class WithExtras(StepRecord):
    """StepRecord and two new fields, declared the one way a field of the step is declared."""

    temperature_used: Annotated[number(0.0, 2.0), Omissible(0.0)] = 0.0
    rejected_depths: Annotated[tupled(whole(1, 32), 32, "rejections per step"), Omissible(())] = ()


EXTRAS = file_model(WithExtras, "WithExtrasFile")


def _extended(rec: StepRecord, **extra) -> WithExtras:
    return WithExtras(**{f.name: getattr(rec, f.name) for f in fields(StepRecord)}, **extra)


def test_the_step_file_model_has_exactly_the_records_fields():
    assert list(StepFile.model_fields) == [f.name for f in fields(StepRecord)]


def test_a_new_field_serialises_validates_and_loads_from_its_declaration_alone():
    rec = make_run().records[1]
    new = _extended(rec, temperature_used=0.7, rejected_depths=(3, 4))
    d = json.loads(json.dumps(to_file(EXTRAS, new)))
    assert d == {**rec.to_dict(), "temperature_used": 0.7, "rejected_depths": [3, 4]}  # written with the rest
    back = EXTRAS.model_validate(d).build()
    assert isinstance(back, WithExtras) and back.rejected_depths == (3, 4) and back.temperature_used == 0.7
    assert back.tree.to_dict() == rec.tree.to_dict() and back.new_token_ids == rec.new_token_ids
    assert math.isnan(back.verdict.target_prob[5])  # null in the file, NaN again in memory
    old = EXTRAS.model_validate(rec.to_dict()).build()  # a file written before the fields: their defaults
    assert old.temperature_used == 0.0 and old.rejected_depths == ()


@pytest.mark.parametrize("change, words", [
    (dict(temperature_used=2.5), "step 1: temperature_used is 2.5; it must be a finite number in [0, 2]"),
    (dict(temperature_used="0.7"), "step 1: temperature_used must be a number; found text '0.7'"),
    (dict(rejected_depths=[1] * 40), "step 1: rejected_depths has 40 entries; at most 32 are accepted (rejections per"),
    (dict(rejected_depths=[True]), "step 1: rejected_depths[0] must be a whole number; found true"),
])
def test_a_new_fields_bad_values_are_refused_in_the_words_of_its_declaration(change, words):
    run = json.loads(runfile.dumps(make_run()))
    run["records"][1] = {**to_file(EXTRAS, _extended(make_run().records[1])), **change}
    with pytest.raises(ValidationError) as e:
        RUN_WITH_EXTRAS.model_validate(run)
    message = explain(e.value.errors(include_url=False)[0], RUN_WITH_EXTRAS)
    assert message.startswith(words), message


# RunFile with those steps: what RunFile itself becomes once StepRecord has the fields
RUN_WITH_EXTRAS = create_model("RunWithExtras", __base__=RunFile,
                               records=(listed(EXTRAS, MAX_RECORDS, "steps per run"), ...))


def test_the_json_budget_is_counted_from_the_schema():
    per_step = json_containers(StepFile)
    assert per_step == 14 + 2 * MAX_TREE_DEPTH  # as counted by hand before: 14 containers, and a phase and its
    # depths at most once per depth
    assert json_containers(EXTRAS) == per_step + 1  # the new list field adds its own container, nothing else
    assert MAX_JSON_CONTAINERS == json_containers(RunFile) + 6


def test_a_run_file_round_trips_through_the_schema():
    run = make_run()
    data = json.loads(runfile.dumps(run))
    assert data == RunFile.model_validate(data).model_dump(mode="json", exclude_unset=True)  # the schema's dump
    back = runfile.loads(json.dumps(data))
    assert [r.to_dict() for r in back.records] == data["records"]
