"""The components that handlers update, grouped so that a handler names them instead of counting positions."""
from __future__ import annotations

from dataclasses import dataclass, fields

import gradio as gr


@dataclass
class View:
    """The components a picture updates, in the order handlers list them as outputs."""

    status: gr.HTML
    caption: gr.HTML
    tree: gr.HTML
    legend: gr.HTML
    check: gr.HTML  # the target's check of the step on screen, node by node
    text: gr.HTML
    answer: gr.Textbox
    numbers: gr.HTML
    race: gr.Plot
    race_note: gr.HTML
    timing: gr.Plot
    whatif: gr.Plot
    whatif_note: gr.HTML
    early: gr.Plot  # why early tokens matter: each depth's share of the accepted length, per drafter
    early_note: gr.HTML
    speed: gr.Plot
    speedup: gr.Plot
    accept: gr.Plot
    depth: gr.Plot
    how: gr.Markdown
    run_btn: gr.Button
    pause_btn: gr.Button
    resume_btn: gr.Button
    stop_btn: gr.Button
    prev_btn: gr.Button
    next_btn: gr.Button
    replay_btn: gr.Button
    export_btn: gr.DownloadButton
    load_btn: gr.UploadButton
    load_note: gr.HTML  # what became of the last file loaded: its own line, refused or loaded (never a toast)
    state: gr.State

    @property
    def outputs(self) -> list:
        return [getattr(self, f.name) for f in fields(self)]


@dataclass
class News:
    """The components that follow the server rather than the visitor's run (see handlers.on_tick): the model line,
    the notes on the tree and the measurement, the methods the page offers (once the drafters have loaded)."""

    model: gr.HTML
    auto: gr.Markdown  # how this device is measured, and what each method's measurement chose
    how: gr.Markdown
    timer: gr.Timer
    method: gr.Radio
    race: gr.CheckboxGroup
    missing: gr.HTML  # which drafters the page cannot offer, and why
    tree_note: gr.Markdown  # the chosen tree preset, and what verifying it costs here
    remeasure: gr.Button  # measures this device again (its news then follows on the timer)

    @property
    def outputs(self) -> list:
        return [self.model, self.auto, self.how, self.timer, self.method, self.race, self.missing, self.tree_note]
