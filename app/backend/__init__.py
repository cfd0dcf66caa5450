"""What all visitors share, and the bridge to gumiho_core: the models (loaded once, in the background), the
auto tree, the runs that can still compute, and starting and advancing runs one step at a time. No Gradio.

    backend     Backend: the loader, the auto tree, the live runs and the step lock, together
    loader      the target and drafter, loaded once; a failure kept to be shown
    auto_tree   what "auto" means on this device: measured, cached, or the fallback preset
    live        runs that can still compute (and their caches), at most MAX_LIVE_RUNS; the race's schedule
    runs        starting a run, advancing it a lane-step (its own, a rival's, plain decoding's), the API's run
"""
from .auto_tree import AUTO_TREE_POLICIES, AutoPick
from .backend import DEFAULT_MAX_PROMPT_TOKENS, Backend, set_threads
from .live import BASELINE, MAIN, MAX_LIVE_RUNS, Lane, Live, LiveRuns, next_lane, progress
from .loader import Loaded
from .runs import api_generate, compute_run, on_gpu, start_run, step_lane

__all__ = ["AUTO_TREE_POLICIES", "BASELINE", "DEFAULT_MAX_PROMPT_TOKENS", "MAIN", "MAX_LIVE_RUNS", "AutoPick",
           "Backend", "Lane", "Live", "LiveRuns", "Loaded", "api_generate", "compute_run", "next_lane", "on_gpu",
           "progress", "set_threads", "start_run", "step_lane"]
