"""The user documentation says only what is true of this checkout: its links resolve, the paths it names exist,
the flags of its command lines are ones the parsers accept, and the README's test commands are CI's.

Fast: the parsers are built, never run, and no model is loaded.
"""
from __future__ import annotations

import argparse
import importlib.util
import re
import shlex
from functools import cache
from pathlib import Path
from unittest import mock

import pytest

ROOT = Path(__file__).resolve().parents[1]
README, CONTRIBUTING = ROOT / "README.md", ROOT / "CONTRIBUTING.md"
DOCS = [README, CONTRIBUTING, *sorted((ROOT / "docs").glob("*.md"))]
PRIVATE_NOTES = "GUMIHO" + ".md"  # the team's notes outside the repository, which nothing here may cite (split: grep finds none)
MAX_README_LINES = 200
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
SPAN = re.compile(r"`([^`\n]+)`")
PROGRAMS = {  # how a documented command line starts -> the parser it must satisfy
    "-m gumiho_core.generate": "generate", "-m gumiho_core.bench": "bench", "-m gumiho_core.train": "train",
    "python app.py": "app", "python3 app.py": "app", "/python app.py": "app",
}


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _prose(text: str) -> str:
    """The text without fenced code blocks (where brackets and backticks are code, not links)."""
    return FENCE.sub("", text)


def _code_lines(text: str) -> list[str]:
    """Command lines shown as code: fenced blocks, indented blocks and inline spans; continuation lines joined."""
    lines = [ln for block in FENCE.findall(text) for ln in block.splitlines()[1:-1]]
    lines += [ln for ln in _prose(text).splitlines() if ln.startswith("    ") and ln.strip()]
    lines += [span for ln in _prose(text).splitlines() for span in SPAN.findall(ln)]
    joined, held = [], ""
    for ln in lines:
        if ln.rstrip().endswith("\\"):
            held += ln.rstrip()[:-1] + " "
        else:
            joined.append((held + ln).strip())
            held = ""
    return joined


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"\s", "-", re.sub(r"[^\w\- ]", "", text))


def anchors(path: Path) -> set[str]:
    return {slug(m) for m in re.findall(r"^#{1,6}\s+(.+?)\s*#*$", _prose(_text(path)), re.M)}


# -- links ---------------------------------------------------------------------------------------------------
def test_every_relative_link_resolves_to_a_file_and_its_anchor():
    broken = []
    for doc in DOCS:
        for target in LINK.findall(_prose(_text(doc))):
            if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
                continue
            file_part, _, anchor = target.partition("#")
            dest = (doc.parent / file_part).resolve() if file_part else doc
            if not dest.exists():
                broken.append(f"{_rel(doc)}: {target} (no such file: {file_part})")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{_rel(doc)}: {target} (no heading '#{anchor}' in {_rel(dest)})")
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_the_readme_links_every_document():
    linked = {(README.parent / t.partition("#")[0]).resolve() for t in LINK.findall(_prose(_text(README)))}
    missing = [_rel(d) for d in DOCS[1:] if d.resolve() not in linked]
    assert not missing, f"README.md links none of: {missing}"


# -- paths ---------------------------------------------------------------------------------------------------
@cache
def _repo_dirs() -> frozenset[str]:
    """The repository's top-level folders (not outputs such as out/ or runs/, nor virtual environments)."""
    return frozenset(p.name for p in ROOT.iterdir() if p.is_dir() and (p.name == ".ci" or not p.name.startswith("."))
                     and p.name not in {"out", "runs", "__pycache__"})


def repo_path(token: str) -> str | None:
    """`token` as a path into this repository (a glob allowed), or None when it is not one: a placeholder, a flag,
    a path outside (`~/...`, `/models/...`, `out/...`), or a bare file name that may live anywhere."""
    token = token.strip("\"'.,;:()").split("=")[-1]
    if not token or any(c in token for c in "<>{}$|") or token.startswith(("-", "/", "~", "http")):
        return None
    first = token.split("/")[0]
    return token if "/" in token and first in _repo_dirs() else None


def named_paths(doc: Path) -> set[str]:
    """The repository paths a document names: inline code spans that are paths, and path words in code."""
    text = _text(doc)
    spans = {p for s in SPAN.findall(_prose(text)) if " " not in s.strip() for p in [repo_path(s.strip())] if p}
    words = {p for line in _code_lines(text) for word in line.split() for p in [repo_path(word)] if p}
    return spans | words


def test_every_repository_path_the_docs_name_exists():
    missing = sorted(f"{_rel(doc)}: {p}" for doc in DOCS for p in named_paths(doc)
                     if not any(ROOT.glob(p.rstrip("/"))) and not (ROOT / p).exists())
    assert not missing, "paths that do not exist:\n" + "\n".join(missing)


def test_contributing_names_every_module_and_only_modules_that_exist():
    """CONTRIBUTING.md's layout has a line for each module of gumiho_core/ and app/, by file name."""
    text = _text(CONTRIBUTING)
    named = set(re.findall(r"`(\w+\.py)`", text))
    modules = {p.name for package in ("gumiho_core", "app") for p in (ROOT / package).rglob("*.py")}
    assert not modules - named - {"__init__.py"}, f"modules CONTRIBUTING.md does not name: {sorted(modules - named)}"
    existing = {p.name for p in ROOT.rglob("*.py") if ".venv" not in p.parts}
    assert not named - existing - {"app.py"}, f"CONTRIBUTING.md names files that do not exist: {named - existing}"


# -- command lines -------------------------------------------------------------------------------------------
def _app_parser() -> argparse.ArgumentParser:
    """The parser app.py builds, caught as it parses (app.py is a script beside the `app` package)."""
    spec = importlib.util.spec_from_file_location("app_main_for_docs", ROOT / "app.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    caught = []
    with mock.patch.object(argparse.ArgumentParser, "parse_args",
                           lambda self, argv=None, namespace=None: caught.append(self) or argparse.Namespace()):
        module.parse_args([])
    return caught[0]


@cache
def parser(program: str) -> argparse.ArgumentParser:
    if program == "generate":
        from gumiho_core.cli import build_parser
    elif program == "bench":
        from gumiho_core.measure.bench import build_parser
    elif program == "train":
        from gumiho_core.training.cli import build_parser
    else:
        return _app_parser()
    return build_parser()


def _options(p: argparse.ArgumentParser) -> set[str]:
    return {s for action in p._actions for s in action.option_strings}


def _commands(p: argparse.ArgumentParser) -> set[str]:
    return {c for action in p._actions if not action.option_strings and action.choices for c in action.choices}


def documented_commands() -> list[tuple[str, str, list[str]]]:
    """(where, program, its arguments) for every command line of a documented program."""
    found = []
    for doc in DOCS:
        for line in _code_lines(_text(doc)):
            for start, program in PROGRAMS.items():
                if start in line:
                    rest = re.split(r"\s(?:&&|\||;|#|>)\s?", line.split(start, 1)[1] + " ")[0]
                    found.append((f"{_rel(doc)}: {line}", program, shlex.split(rest)))
                    break
    return found


def test_the_docs_show_command_lines_of_every_program():
    assert {program for _, program, _ in documented_commands()} == {"generate", "bench", "train", "app"}


@pytest.mark.parametrize("program", ["generate", "bench", "train", "app"])
def test_every_flag_in_a_documented_command_line_is_accepted(program):
    options, commands, bad = _options(parser(program)), _commands(parser(program)), []
    for where, prog, args in documented_commands():
        if prog != program:
            continue
        flags = [a.split("=")[0] for a in args if a.startswith("-") and not re.match(r"-\d", a)]
        bad += [f"{where}\n    {flag} is not an option of {program}" for flag in flags if flag not in options]
        if commands and args and not args[0].startswith("-") and args[0] not in commands:
            bad.append(f"{where}\n    {args[0]} is not a command of {program}")
    assert not bad, "\n".join(bad)


def test_the_readme_test_commands_are_the_ones_ci_runs():
    ci = [ln.strip() for ln in _text(ROOT / ".ci" / "run").splitlines()]
    wanted = [ln for ln in ci if ln.startswith("./setup.sh")] + [ln for ln in ci if " -m pytest " in ln]
    assert len(wanted) == 2, f".ci/run should set up with ./setup.sh and run pytest once each; found {wanted}"
    shown = [ln.strip() for ln in _code_lines(_text(README))]
    assert all(w in shown for w in wanted) or " && ".join(wanted) in shown, (
        f"README.md must show CI's commands as they are in .ci/run: {wanted}")


# -- the README itself ---------------------------------------------------------------------------------------
def test_the_readme_is_short_and_keeps_the_space_configuration_first():
    import yaml

    text = _text(README)
    assert len(text.splitlines()) <= MAX_README_LINES, f"README.md has {len(text.splitlines())} lines"
    assert text.startswith("---\n"), "the Space's YAML block must open README.md"
    meta = yaml.safe_load(text.split("---\n")[1])
    assert meta["sdk"] == "gradio" and meta["app_file"] == "app.py"


def test_the_readme_holds_one_dated_measurement():
    dates = set(re.findall(r"\b20\d\d-\d\d-\d\d\b", _text(README)))
    assert len(dates) <= 1, f"README.md should date only its one results table; it names {sorted(dates)}"


def test_no_document_cites_the_private_method_notes():
    cited = [_rel(d) for d in DOCS if PRIVATE_NOTES in _text(d)]
    assert not cited, f"these cite {PRIVATE_NOTES}, which is not part of the repository: {cited}"
