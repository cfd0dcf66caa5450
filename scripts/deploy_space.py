"""Deploy this working tree to a Hugging Face Space in one command (issue #21).

    python scripts/deploy_space.py OWNER/NAME --dry-run     # what would go and what would be set; no token needed
    python scripts/deploy_space.py OWNER/NAME [--hardware cpu-basic] [--private] [--var KEY=VALUE ...] [--with-data]

It creates the Space (Gradio SDK) if it does not exist, sets its variables and hardware when they are given, and
uploads the files with huggingface_hub's upload_folder. No git history goes: this repository's history holds plain
blobs over the 10 MB the Hub accepts outside LFS, so a `git push` to a Space is refused, while upload_folder sends
only the files and stores the large ones in LFS itself. The Space then holds exactly the listed files: files on it
that are not in the list are deleted (its .gitattributes is kept).

Which files (scripts/space_files.py): in a git checkout, those git would commit (tracked, and untracked but not
ignored), elsewhere every file under the folder; minus what a Space must not carry or never uses (.venv, caches,
out/, runs/, tests/, .ci/, and data/ unless --with-data). The dry run prints that list, and the same list is the
upload's allow_patterns, so the two cannot disagree.

The token comes from HF_TOKEN or the login cache (`hf auth login`). Bad input exits 2 with one line; a refusal by
the Hub exits 1 with one line.
"""
from __future__ import annotations

import argparse
import glob
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from space_files import LFS_ABOVE, DeployError, SpaceFile, check_limits, git_commit, human, select

ROOT = Path(__file__).resolve().parent.parent
SDK = "gradio"
VAR_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
SECRETS = ("HF_TOKEN",)  # a Space variable is public: these belong in the Space's secrets


class HubRefused(Exception):
    """A call to the Hub failed: one line for the user, exit code 1."""


@dataclass(frozen=True)
class Plan:
    space_id: str
    root: Path
    files: tuple[SpaceFile, ...]
    left_out: tuple[tuple[str, int], ...]  # (reason, how many files)
    hardware: str | None = None
    variables: tuple[tuple[str, str], ...] = ()
    private: bool = False
    source: str = ""  # where the list came from, and the commit

    def __post_init__(self):
        check_space_id(self.space_id)
        if not self.files:
            raise DeployError(f"nothing to upload from {self.root}")
        if self.hardware is not None:
            check_hardware(self.hardware)
        for key, _ in self.variables:
            check_var_key(key)

    @property
    def total(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def allow_patterns(self) -> list[str]:
        """Every file by its exact path (escaped: upload_folder matches patterns with fnmatch)."""
        return [glob.escape(f.path) for f in self.files]


# -- input ------------------------------------------------------------------------------------------------------
def check_space_id(space_id: str) -> str:
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(space_id)
        ok = space_id.count("/") == 1
    except HFValidationError:
        ok = False
    if not ok:
        raise DeployError(f"SPACE_ID {space_id!r} is not OWNER/NAME (letters, digits, '-', '_', '.')")
    return space_id


def check_hardware(name: str) -> str:
    from huggingface_hub import SpaceHardware

    known = [h.value for h in SpaceHardware]
    if name not in known:
        raise DeployError(f"unknown hardware {name!r}: use one of {', '.join(known)}")
    return name


def check_var_key(key: str) -> str:
    if not VAR_KEY.fullmatch(key):
        raise DeployError(f"variable name {key!r} is not an environment variable name")
    if key in SECRETS:
        raise DeployError(f"{key} is a secret: set it in the Space's settings as a secret (a variable is public)")
    return key


def parse_var(text: str) -> tuple[str, str]:
    key, eq, value = text.partition("=")
    if not eq:
        raise DeployError(f"--var {text!r} is not KEY=VALUE")
    return check_var_key(key), value


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, not argparse's usage block
        raise DeployError(message)


def parse_args(argv=None) -> argparse.Namespace:
    p = _Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("space_id", metavar="SPACE_ID", help="OWNER/NAME of the Space (created if it does not exist)")
    p.add_argument("--hardware", help="e.g. cpu-basic, a10g-small (docs/deploy.md, 'Hugging Face Space'); default: unchanged")
    p.add_argument("--private", action="store_true", help="make the Space private")
    p.add_argument("--var", action="append", default=[], metavar="KEY=VALUE",
                   help="a Space variable, e.g. GUMIHO_TARGET=lmsys/vicuna-7b-v1.3 (repeatable)")
    p.add_argument("--with-data", action="store_true", help="also upload data/ (the training corpus)")
    p.add_argument("--dry-run", action="store_true", help="print what would be uploaded and set; change nothing")
    return p.parse_args(argv)


def check_space_config(root: Path, files: tuple[SpaceFile, ...]) -> None:
    """The Space reads its configuration from README.md's YAML block; it must name sdk gradio and an app file
    that goes, and requirements.txt must go (a Space installs only that)."""
    from huggingface_hub import metadata_load

    paths = {f.path for f in files}
    if "README.md" not in paths or "requirements.txt" not in paths:
        raise DeployError("README.md (the Space's configuration) and requirements.txt must both be uploaded")
    meta = metadata_load(root / "README.md") or {}
    if meta.get("sdk") != SDK:
        raise DeployError(f"README.md's YAML block says sdk {meta.get('sdk')!r}; this script deploys sdk {SDK!r}")
    if meta.get("app_file", "app.py") not in paths:
        raise DeployError(f"README.md's app_file {meta.get('app_file', 'app.py')!r} is not among the files")


# -- the plan, shown and carried out ----------------------------------------------------------------------------
def make_plan(args: argparse.Namespace, root: Path = ROOT) -> Plan:
    variables = tuple(parse_var(v) for v in args.var)
    files, dropped, source = select(root, args.with_data)
    commit = git_commit(root)
    plan = Plan(args.space_id, root, tuple(files), tuple(sorted(dropped.items())),
                args.hardware, variables, args.private, source + (f", at {commit}" if commit else ""))
    check_limits(plan.files)
    check_space_config(root, plan.files)
    return plan


def describe(plan: Plan, token_found: bool) -> list[str]:
    lines = [f"Space {plan.space_id} (sdk {SDK}{', private' if plan.private else ''}), from {plan.root} "
             f"({plan.source})"]
    lines += [f"{f.size:>12,d}  {human(f.size):>9}  {f.path}{'  (LFS)' if f.lfs else ''}" for f in plan.files]
    lines.append(f"{len(plan.files)} files, {plan.total:,d} bytes ({human(plan.total)}) in total "
                 f"((LFS): over {LFS_ABOVE // 2**20} MiB, so stored in LFS)")
    lines += [f"left out: {n} file{'s' * (n != 1)}: {reason}" for reason, n in plan.left_out]
    lines.append(f"hardware: {plan.hardware or 'unchanged (a new Space starts on cpu-basic)'}")
    lines.append("variables: " + (", ".join(f"{k}={v}" for k, v in plan.variables) or "none set"))
    lines.append("on upload, files on the Space that are not in this list are deleted (.gitattributes is kept)")
    lines.append("token: " + ("found (HF_TOKEN or the login cache)" if token_found else
                              "none (set HF_TOKEN or run `hf auth login` before uploading)"))
    return lines


def _call(step: str, fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except Exception as e:  # HTTP, network, permission: each means the same to the user, the Hub said no
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise HubRefused(f"{step} failed: {type(e).__name__}: {first}") from None


def deploy(plan: Plan, api, token: str):
    """Create the Space if needed, set its variables and hardware, then upload the listed files."""
    sid = plan.space_id
    _call("creating the Space", api.create_repo, sid, repo_type="space", space_sdk=SDK, exist_ok=True,
          private=True if plan.private else None, token=token)
    if plan.private:  # create_repo leaves an existing Space's visibility as it is
        _call("making the Space private", api.update_repo_settings, sid, private=True, repo_type="space", token=token)
    for key, value in plan.variables:
        _call(f"setting variable {key}", api.add_space_variable, sid, key, value, token=token)
    if plan.hardware:
        _call(f"requesting hardware {plan.hardware}", api.request_space_hardware, sid, plan.hardware, token=token)
    return _call("uploading the files", api.upload_folder, repo_id=sid, repo_type="space", folder_path=str(plan.root),
                 allow_patterns=plan.allow_patterns, delete_patterns="*", token=token,
                 commit_message=f"Deploy with scripts/deploy_space.py ({plan.source})")


def main(argv=None, api=None, get_token=None, root: Path = ROOT) -> int:
    """Deploys `root` (this checkout); api and get_token default to huggingface_hub's HfApi() and get_token."""
    import huggingface_hub

    get_token = get_token or huggingface_hub.get_token
    try:
        args = parse_args(argv)
        plan = make_plan(args, root)
        token = get_token()
        print("\n".join(describe(plan, token is not None)))
        if args.dry_run:
            return 0
        if token is None:
            raise DeployError("no Hugging Face token: set HF_TOKEN or run `hf auth login`")
        result = deploy(plan, api or huggingface_hub.HfApi(), token)
    except DeployError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except HubRefused as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"uploaded: {getattr(result, 'commit_url', result)}; the Space: https://huggingface.co/spaces/{plan.space_id}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
