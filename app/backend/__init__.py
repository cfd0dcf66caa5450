"""What all visitors share, and the bridge to gumiho_core: the models (loaded once, in the background), this
device's measured trees, the runs that can still compute, and starting and advancing runs one step at a time.
No Gradio.

    backend     Backend: the loader, the measurements, the live runs and the step lock, together
    loader      the target and each family member's drafter, loaded once; a failure kept to be shown
    auto_tree   this device's measured trees per method, and the tree each request resolves to here
    measuring   where a measurement runs (its own low-priority process on a CPU) and how it takes turns
    live        runs that can still compute (and their caches), at most MAX_LIVE_RUNS; the race's schedule
    runs        starting a run, advancing it a lane-step (its own, a rival's, plain decoding's), the API's run
"""
from .auto_tree import AUTO_TREE_POLICIES, Measurements
from .backend import DEFAULT_MAX_PROMPT_TOKENS, Backend, set_threads
from .live import BASELINE, MAIN, MAX_LIVE_RUNS, Lane, Live, LiveRuns, next_lane, progress
from .loader import Loaded, drafter_specs, parse_draft_for
from .runs import api_generate, compute_run, on_gpu, settle, start_run, step_lane

__all__ = ["AUTO_TREE_POLICIES", "BASELINE", "DEFAULT_MAX_PROMPT_TOKENS", "MAIN", "MAX_LIVE_RUNS", "Backend", "Lane",
           "Live", "Loaded", "LiveRuns", "Measurements", "api_generate", "compute_run", "drafter_specs", "next_lane",
           "on_gpu", "parse_draft_for", "progress", "set_threads", "settle", "start_run", "step_lane"]
