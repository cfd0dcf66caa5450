"""The GPU path without a GPU: tensors follow the target's device, caches stay where their layers are, and every
timed stage waits for the device. Placement is checked on simulated devices (tests/simulated_device.py)."""
import types

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import DynamicCache

import gumiho_core.measure.costs as costs
import gumiho_core.engine as engine
import gumiho_core.timing as timing
from gumiho_core import DecodeConfig, TreeConfig, generate, load_drafter, load_target, start
from gumiho_core.drafter import SharedWeights
from gumiho_core.drafting import DraftContext, build_tree
from gumiho_core.kv_cache import keep_accepted
from gumiho_core.tree import DraftTree
from simulated_device import SimulatedDevices, device_of, place_module, place_tensor

pytestmark = pytest.mark.usefixtures("one_thread")

GPU0, GPU1, GPU2 = (torch.device("cpu", i) for i in (1, 2, 3))  # simulated devices
TREE = TreeConfig(top_k=3, mlp_topk=4, pruning=6, total_tokens=24, depth=7)
PROMPT = [5, 6, 7, 8, 9]
STAGES = {"prefill": 2, "autoregressive": 1, "speculative": 3}  # laps of a step after its start: verify, commit...


def placed_pair(tiny_pair, monkeypatch, target_dtype="bfloat16", drafter_dtype="bfloat16"):
    """The tiny pair loaded on the CPU, then moved whole to simulated device GPU0."""
    monkeypatch.setenv("GUMIHO_DRAFTER_DTYPE", drafter_dtype)
    target = load_target(str(tiny_pair[0]), device="cpu", dtype=target_dtype)  # half: no packed CPU layers
    drafter = load_drafter(str(tiny_pair[1]), target)
    place_module(target.model, GPU0)
    place_module(drafter, GPU0)
    drafter.bind(SharedWeights(*(None if t is None else place_tensor(t, GPU0) for t in vars(drafter.shared).values())))
    return target, drafter


@pytest.mark.parametrize("method,temperature", [("gumiho", 0.0), ("gumiho-serial", 0.0), ("gumiho", 0.8), ("ar", 0.0)])
def test_a_session_keeps_every_tensor_on_the_target_device(tiny_pair, monkeypatch, method, temperature):
    target, drafter = placed_pair(tiny_pair, monkeypatch, "bfloat16", "float16")
    decode = DecodeConfig(max_new_tokens=24, temperature=temperature, seed=3)
    expected = generate(start(method, target, PROMPT, decode, TREE, drafter)).token_ids  # no simulation
    sim = SimulatedDevices()
    with sim:
        session = start(method, target, PROMPT, decode, TREE, drafter)
        run = generate(session)
    assert sim.mixed == []  # each would be "Expected all tensors to be on the same device" on a GPU
    assert [p for p in sim.promoted if "gumiho_core" in p] == []  # the engine mixes no dtypes by accident
    assert target.device == GPU0 and {device_of(layer.keys) for layer in session.cache.layers} == {GPU0}
    if method != "ar":
        assert device_of(session.ctx.cache._k[0]) == device_of(session.ctx.last_out) == GPU0
    assert run.token_ids == expected  # the simulation changes placement only


def test_a_host_tensor_in_the_engine_is_caught(tiny_pair, monkeypatch):
    """The simulation can fail: a tree mask left on the host is what a GPU would refuse."""
    target, drafter = placed_pair(tiny_pair, monkeypatch)
    on_device = DraftTree.attention_mask
    monkeypatch.setattr(DraftTree, "attention_mask", lambda tree, past, dtype, _: on_device(tree, past, dtype, "cpu"))
    sim = SimulatedDevices()
    with sim:
        generate(start("gumiho", target, PROMPT, DecodeConfig(max_new_tokens=6), TREE, drafter))
    assert sim.mixed and any("cpu:1" in m and "'cpu'" in m for m in sim.mixed), sim.mixed


def test_drafting_across_a_device_map(tiny_pair, monkeypatch):
    """--device-map auto: embedding on the first GPU, the last layer's features on another, lm_head and drafter on
    a third. The drafter must take its inputs from wherever they are."""
    target, drafter = placed_pair(tiny_pair, monkeypatch)
    shared = drafter.shared
    drafter.bind(SharedWeights(place_tensor(shared.embed, GPU1), shared.lm_head))
    sim = SimulatedDevices()
    with sim:
        ctx = DraftContext(drafter)
        feats = place_tensor(torch.randn(len(PROMPT), drafter.cfg.hidden_size, dtype=target.dtype), GPU2)
        ctx.ingest(feats, place_tensor(torch.tensor(PROMPT[1:] + [3]), GPU2))
        tree, _ = build_tree(ctx, 3, TREE)
    assert sim.mixed == [] and device_of(ctx.last_out) == GPU0 and len(tree) == TREE.total_tokens


def test_cache_compaction_keeps_each_layer_on_its_device():
    """A cache whose layers sit on two GPUs, compacted with node indices from a third."""
    torch.manual_seed(0)
    past, nodes, accepted = 4, 6, [0, 2, 5]
    full = [torch.randn(1, 2, past + nodes, 8) for _ in range(2)]
    sim = SimulatedDevices()
    with sim:
        cache = DynamicCache()
        for i, (k, device) in enumerate(zip(full, (GPU0, GPU1))):
            cache.update(place_tensor(k.clone(), device), place_tensor(-k.clone(), device), i)
        keep_accepted(cache, past, place_tensor(torch.tensor(accepted), GPU2))
    assert sim.mixed == []
    for layer, k, device in zip(cache.layers, full, (GPU0, GPU1)):
        want = torch.cat((k[:, :, :past], k[:, :, [past + a for a in accepted]]), dim=2)
        assert device_of(layer.keys) == device and torch.equal(layer.keys, want) and torch.equal(layer.values, -want)


# -- timing ------------------------------------------------------------------------------------------------
def test_stopwatch_waits_for_a_cuda_device(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: calls.append(device))
    watch = timing.Stopwatch(torch.device("cuda", 0))
    watch.start()
    watch.lap()
    timing.Stopwatch(torch.device("cpu")).lap()
    assert calls == [torch.device("cuda", 0)] * 2


@pytest.fixture
def clocked(monkeypatch):
    """The engine's clock as a counter (each reading one second later), and a log of device synchronisations."""
    log, ticks = [], iter(range(10**6))
    fake = types.SimpleNamespace(perf_counter=lambda: float(next(ticks)))
    monkeypatch.setattr(timing, "time", fake)
    monkeypatch.setattr(engine, "time", fake)
    monkeypatch.setattr(timing, "synchronize", lambda device: log.append(device))
    return log


@pytest.mark.parametrize("trace", [True, False])
@pytest.mark.parametrize("method", ["gumiho", "ar"])
def test_each_timed_stage_waits_for_the_device_and_stages_add_up(tiny_pair, monkeypatch, clocked, method, trace):
    target, drafter = placed_pair(tiny_pair, monkeypatch)
    session = start(method, target, PROMPT, DecodeConfig(max_new_tokens=12), TREE, drafter, trace=trace)
    spent = 0.0
    while not session.done:
        clocked.clear()
        rec = session.step()
        timed = [device for device in clocked if device is not None]  # None: an untraced phase's own clock
        assert set(timed) == {target.device} and len(timed) >= 1 + STAGES[rec.kind], (rec.kind, clocked)
        assert rec.seconds <= rec.compute_s - spent, "stage times are parts of the step: none counted twice"
        spent = rec.compute_s


def test_autotree_timings_wait_for_the_device(tiny_pair, monkeypatch):
    target, drafter = placed_pair(tiny_pair, monkeypatch)
    session = start("gumiho", target, PROMPT, DecodeConfig(max_new_tokens=12), TREE, drafter)
    session.step()
    syncs = []
    monkeypatch.setattr(costs, "synchronize", lambda device: syncs.append(device))
    ar_s, verify_s = costs.measure_verify(session, nodes=(2, 4), rounds=2)
    assert set(syncs) == {target.device} and len(syncs) == 2 * 3 * 3  # before and after each call: 3 sizes, a warm-up
    #                                                                   round and 2 timed rounds
    assert set(verify_s) == {"2", "4"} and ar_s > 0


def test_auto_dtype_is_bf16_only_where_the_gpu_computes_it(monkeypatch):
    """A T4 answers is_bf16_supported() with True (it emulates bf16, slowly): auto must pick fp16 there."""
    from gumiho_core.models import resolve_dtype

    cuda = torch.device("cuda", 0)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: including_emulation)  # T4
    assert resolve_dtype("auto", cuda) == torch.float16
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: True)  # A10G, L4, H100
    assert resolve_dtype("auto", cuda) == torch.bfloat16
    assert resolve_dtype("auto", torch.device("cpu")) == torch.float32


# -- training on an accelerator (both found by the first run on a GPU, 2026-12-04) ---------------------------
def test_the_heads_a_run_trains_live_on_the_target_device():
    """A run's drafter is made on the CPU; it must move to the target's device, or the first micro-step mixes them."""
    from gumiho_core.training.trainer import TrainConfig, new_drafter
    from tiny import tiny_target

    target = tiny_target(seed=11, vocab=61, hidden=48, heads=4, kv_heads=2)
    target.model.to("meta")  # a device other than the CPU that allocates nothing
    drafter = new_drafter(target, torch.tensor([0, 5, 7]), TrainConfig(precision="fp32"))
    assert {p.device.type for p in drafter.parameters()} == {"meta"}
    assert drafter.shared.lm_head.device.type == "meta" and drafter.shared.lm_head.shape == (3, 48)


def test_feature_noise_is_drawn_on_the_batch_device():
    """Drawing it on the host and copying it over mixed devices once, and cost a third of a GPU micro-step."""
    from gumiho_core.training.batch import Batch, uniform_noise

    B, T, H = 2, 5, 4
    batch = Batch(*(place_tensor(t, GPU0) for t in (torch.zeros(B, T, H), torch.zeros(B, T, dtype=torch.long),
                                                     torch.ones(B, T, dtype=torch.bool), torch.ones(B, T, dtype=torch.bool),
                                                     torch.tensor([5, 3]))))
    sim = SimulatedDevices()
    with sim:
        noise = uniform_noise(batch, 0.2)
    assert sim.mixed == [] and device_of(noise) == GPU0
    assert noise.abs().max() <= 0.5 * 0.2 * 512 / 3  # (U - 0.5) * scale * 512 / length: the shorter row's bound


def test_a_checkpoint_keeps_the_gpu_random_state_the_noise_is_drawn_from(monkeypatch):
    """A resumed GPU run draws the same noise as an uninterrupted one only if the GPU's random state comes back."""
    from gumiho_core.training.checkpoint import random_state, restore_random_state

    cuda, gpu_state, restored = torch.device("cuda", 0), torch.arange(8, dtype=torch.uint8), []
    monkeypatch.setattr(torch.cuda, "get_rng_state", lambda device: gpu_state if device == cuda else None)
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda state, device: restored.append((state, device)))
    state = random_state(cuda)
    assert state["device_rng"] is gpu_state and random_state(torch.device("cpu"))["device_rng"] is None
    restore_random_state(cuda, state)
    assert restored == [(gpu_state, cuda)]
    restore_random_state(cuda, {"torch_rng": torch.get_rng_state()})  # a checkpoint written before: nothing to set
    assert len(restored) == 1



WAITS = ("_local_scalar_dense", "nonzero", "_unique2", "unique_dim", "unique_consecutive", "masked_select",
         "is_nonzero", "equal")


class _Waits(TorchDispatchMode):
    """Records, while `on`, the ops that make a CUDA host wait for the queue: a value read into Python, and an op
    whose result's size depends on the values (nonzero, unique, masked_select, indexing by a boolean mask)."""

    def __init__(self):
        super().__init__()
        self.waits, self.on = [], False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.__name__.split(".")[0]
        indices = args[1] if name.startswith("index") and isinstance(args[1], (list, tuple)) else ()
        if self.on and (name in WAITS or any(i is not None and i.dtype == torch.bool for i in indices)):
            self.waits.append(name)
        return func(*args, **(kwargs or {}))


def test_a_training_micro_step_never_waits_for_the_device(monkeypatch, tmp_path):
    """What the data decides (the rows that count, the heads' rows, the CE's sampled positions) is planned on the
    host before the batch moves (training/plan.py); from there a micro-step, backward included, queues its ops
    without reading the device. Before, it waited ~40 times on a GPU (each nonzero, boolean index, metric read)."""
    import random

    from gumiho_core.training.data import Sequence
    from gumiho_core.training.objective import gumiho_loss
    from gumiho_core.training.rollout import ROLLOUTS
    from gumiho_core.training.trainer import TrainConfig, Trainer, micro_batches
    from tiny import tiny_target

    target = tiny_target(seed=11, vocab=61, hidden=48, heads=4, kv_heads=2)
    g = torch.Generator().manual_seed(0)
    seqs = [Sequence(torch.randn(n, 48, generator=g), torch.randint(0, 61, (n,), generator=g), torch.arange(n) >= 3)
            for n in (19, 25, 31, 14)]
    for rollout in ROLLOUTS:
        trainer = Trainer(target, seqs, TrainConfig(precision="fp32", draft_vocab=30, holdout=0.0, rollout=rollout),
                          tmp_path / rollout)
        weights, micro, mode = trainer._weights(), micro_batches(seqs, 4096, random.Random(0))[0], _Waits()
        planned = trainer._on_device

        def on_device(*args, **kwargs):
            moved = planned(*args, **kwargs)
            mode.on = True  # the batch and its plan are on the device from here
            return moved

        monkeypatch.setattr(trainer, "_on_device", on_device)
        with mode:
            trainer._micro_step(micro, weights)
        assert mode.waits == [] and trainer.progress.tokens == sum(len(s.ids) for s in micro), (rollout, mode.waits)
        batch, noise, _ = planned(micro, weights, metrics=False)
        with mode:  # the control: the same loss planned from the batch on the device waits
            gumiho_loss(trainer.drafter, batch, weights, noise, metrics=False, rollout=rollout)
        assert mode.waits.count("nonzero") >= 3 and "_local_scalar_dense" in mode.waits, mode.waits
