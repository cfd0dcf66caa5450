"""generate(), the one decode loop: the step lock it shares, and the run's JSON (RunResult.report) that the
CLI and the app's API both return."""
import threading

import pytest
from tiny import random_drafter, tiny_target

from gumiho_core import DecodeConfig, TreeConfig, generate, start


@pytest.fixture(scope="module")
def pair():
    target = tiny_target(seed=0, scale=6.0)
    return target, random_drafter(target, seed=1)


class CountingLock:
    """A lock that counts how often it is taken and checks that no step runs outside it."""

    def __init__(self):
        self.lock, self.taken = threading.Lock(), 0

    def __enter__(self):
        self.lock.acquire()
        self.taken += 1

    def __exit__(self, *exc):
        self.lock.release()

    def locked(self) -> bool:
        return self.lock.locked()


@pytest.mark.parametrize("method", ["gumiho", "ar"])
def test_generate_holds_the_lock_for_each_step_and_only_then(pair, method):
    target, drafter = pair
    lock = CountingLock()
    inside = []
    session = start(method, target, [5, 6, 7], DecodeConfig(max_new_tokens=12), TreeConfig(total_tokens=8), drafter)
    step = session.step
    session.step = lambda: (inside.append(lock.locked()), step())[1]  # was the lock held during this step?
    run = generate(session, lock=lock, on_step=lambda rec: inside.append(lock.locked()))
    assert lock.taken == run.steps + 1  # the prefill and every decoding step, one at a time
    assert inside == [True, False] * (run.steps + 1)  # held in each step, let go before on_step
    alone = generate(start(method, target, [5, 6, 7], DecodeConfig(max_new_tokens=12), TreeConfig(total_tokens=8),
                           drafter))
    assert run.token_ids == alone.token_ids and run.steps == alone.steps


def test_a_busy_lock_makes_generate_wait_and_the_wait_is_not_counted(pair):
    target, drafter = pair
    lock = threading.Lock()
    lock.acquire()
    released = threading.Event()

    def release_later():
        released.wait(5)
        lock.release()

    helper = threading.Thread(target=release_later)
    helper.start()
    session = start("ar", target, [5, 6, 7], DecodeConfig(max_new_tokens=3))
    result = {}
    worker = threading.Thread(target=lambda: result.update(run=generate(session, lock=lock)))
    worker.start()
    worker.join(0.3)
    assert worker.is_alive() and not session.generated  # no step while another holds the lock
    released.set()
    worker.join(30)
    helper.join(5)
    assert len(result["run"].token_ids) == 3
    assert result["run"].wall_s <= result["run"].records[-1].compute_s + 0.05  # time inside the steps only


def test_the_report_is_the_summary_plus_text_target_and_settings(pair):
    target, drafter = pair
    tree = TreeConfig(top_k=3, total_tokens=8)
    decode = DecodeConfig(max_new_tokens=6, seed=2)
    run = generate(start("gumiho-serial", target, [5, 6, 7, 8], decode, tree, drafter))
    out = run.report("some text", "tiny-0", "explicit flags")
    assert list(out) == ["method", "token_ids", "steps", "new_tokens", "mean_accept_len", "wall_s", "tokens_per_s",
                         "stop_reason", "text", "target", "prompt_tokens", "tree", "tree_source", "decode"]
    assert out["method"] == "gumiho-serial" and out["token_ids"] == list(run.token_ids) and out["text"] == "some text"
    assert out["tree"] == tree.with_(mode="serial").to_dict() and out["tree_source"] == "explicit flags"
    assert out["decode"] == decode.to_dict() and out["prompt_tokens"] == 4 and out["target"] == "tiny-0"
    plain = generate(start("ar", target, [5, 6, 7, 8], decode)).report("t", "tiny-0", None)
    assert plain["tree"] is None and plain["tree_source"] is None and plain["method"] == "ar"
