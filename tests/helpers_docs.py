"""The documentation as tests read it: the commands README.md, DATASETS.md and docs/*.md show, the tables they hold,
and a sandbox that runs a command as a user pastes it, from the repository root, without the network."""
from __future__ import annotations

import ast
import glob
import os
import re
import subprocess
import sys
from dataclasses import dataclass

from tests.helpers_run import HANG_GUARD_S, REPO

DOC_FILES = ("README.md", "DATASETS.md", *sorted(os.path.relpath(p, REPO) for p in glob.glob(f"{REPO}/docs/*.md")))
PROGRAMS = r"(?:python3?|bash|make|torchrun|\.venv/bin/python)"
COMMAND_SPAN = re.compile(rf"^(?:[A-Z_][A-Z0-9_]*=\S*\s+)*{PROGRAMS}(?:\s|$)")
"""An inline code span that is a command: a program, after any ``KEY=value`` knobs."""
FENCE = re.compile(r"^```(\w*)\s*$")


@dataclass(frozen=True)
class Documented:
    """One command as a document shows it: the file, the line it starts on and its text (one line, spaces
    collapsed)."""

    file: str
    line: int
    text: str


def read_doc(name: str) -> str:
    with open(os.path.join(REPO, name), encoding="utf-8") as f:
        return f.read()


def strip_comment(line: str) -> str:
    """``line`` without a shell comment (a ``#`` at its start or after a blank, outside quotes)."""
    quote = ""
    for i, ch in enumerate(line):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
        continue
    return line


def shell_commands(lines: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """The commands of a shell block: continuations (a trailing backslash) joined, comments and blank lines
    dropped; a line holding ``a && b`` stays one command."""
    out, parts, start = [], [], 0
    for number, line in lines:
        if not parts:
            start = number
        text = line.rstrip()
        if text.endswith("\\"):
            parts.append(text[:-1])
            continue
        command = " ".join(strip_comment(" ".join([*parts, text])).split())
        parts = []
        if command:
            out.append((start, command))
    return out


def commands_of(name: str) -> list[Documented]:
    """Every command of one document: the lines of its ```bash blocks and of its indented code blocks, and the
    inline code spans of its prose that are commands (:data:`COMMAND_SPAN`)."""
    found: list[tuple[int, str]] = []
    prose: list[tuple[int, str]] = []
    indented: list[tuple[int, str]] = []
    block: list[tuple[int, str]] | None = None
    shell = False
    lines = read_doc(name).split("\n")
    for number, line in enumerate(lines, 1):
        fence = FENCE.match(line)
        if fence and block is None:
            block, shell = [], fence.group(1) == "bash"
            prose.append((number, ""))
        elif line.startswith("```") and block is not None:
            found += shell_commands(block) if shell else []
            block = None
            prose.append((number, ""))
        elif block is not None:
            block.append((number, line))
        elif line.startswith("    ") and (indented and indented[-1][0] == number - 1 or not prose[-1][1].strip()):
            indented.append((number, line[4:]))  # an indented code block (it starts after a blank line)
            prose.append((number, ""))
        else:
            prose.append((number, line))
    found += shell_commands(indented)
    paragraph: list[tuple[int, str]] = []
    for number, line in [*prose, (len(lines) + 1, "")]:
        if line.strip():
            paragraph.append((number, line))
            continue
        text = "\n".join(text for _, text in paragraph)
        for match in re.finditer(r"(?<!`)`([^`]+)`(?!`)", text):
            command = " ".join(match.group(1).split())
            if COMMAND_SPAN.match(command):
                found.append((paragraph[0][0] + text.count("\n", 0, match.start()), command))
        paragraph = []
    return [Documented(name, number, command) for number, command in sorted(found)]


def documented_commands() -> list[Documented]:
    """Every command of :data:`DOC_FILES`, in document order."""
    return [command for name in DOC_FILES for command in commands_of(name)]


def quoted_block(doc: str, first: str, after: str = "") -> list[str]:
    """The lines of ``doc``'s fenced block that starts with the line ``first`` (the first such block after the line
    holding ``after``)."""
    lines = read_doc(doc).split("\n")
    begin = next(i for i, line in enumerate(lines) if after in line)
    start = next(i for i in range(begin, len(lines)) if lines[i].startswith(first))
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("```"))
    return lines[start:end]


DASHES = re.compile(r"^-+(?: +-+)*$")
NUMBER = re.compile(r"^[-+]?[\d,]*\.?\d+%?$")


def table_shapes(lines: list[str]) -> list[tuple[list[str], list[list[str]]]]:
    """The shape of each plain table (tabulate's ``simple``: a header, a dashes line, rows up to a blank line) in
    ``lines``: its column names and rows, each number as ``#``; what a page's table must share with the table a
    command prints, whatever the measurement."""
    shapes = []
    for i, line in enumerate(lines):
        if i == 0 or not DASHES.match(line.rstrip()):
            continue
        starts = [m.start() for m in re.finditer(r"-+", line)]
        rows = []
        for row in lines[i + 1:]:
            if not row.strip():
                break
            rows.append(["#" if NUMBER.match(cell) else cell for cell in cut(row, starts)])
        shapes.append((cut(lines[i - 1], starts), rows))
    return shapes


def cut(line: str, starts: list[int]) -> list[str]:
    """The cells of a table's ``line`` whose columns start at ``starts``."""
    return [line[a:b].strip() for a, b in zip(starts, [*starts[1:], None])]


def markdown_table(text: str, header: str) -> list[list[str]]:
    """The rows (cells stripped) of the markdown table in ``text`` whose header row starts with ``header``."""
    lines = text.split("\n")
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows


def sandbox_env(tmp: str, **extra: str) -> dict[str, str]:
    """A user's environment in ``tmp``: this interpreter's folder first on PATH (``python`` is it), a fresh HOME and
    caches, no GPU, and the offline knobs set, so nothing is downloaded; nothing else of the caller's environment
    (no DATA, CLIP_WEIGHTS_DIR, HF_ENDPOINT, VIRTUAL_ENV, ...)."""
    env = {"PATH": f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
           "HOME": os.path.join(tmp, "home"), "XDG_CACHE_HOME": os.path.join(tmp, "cache"),
           "HF_HOME": os.path.join(tmp, "hf"), "TMPDIR": tmp, "LANG": "C.UTF-8", "CUDA_VISIBLE_DEVICES": "",
           "OMP_WAIT_POLICY": "PASSIVE", "PETR_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
    os.makedirs(env["HOME"], exist_ok=True)
    return {**env, **extra}


def run_as_written(command: str, env: dict[str, str], cwd: str = REPO) -> subprocess.CompletedProcess:
    """``command`` through bash, as pasted into a terminal at ``cwd`` (the repository root); stdout and stderr
    together, in order."""
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=HANG_GUARD_S)


def node_exists(node: str) -> bool:
    """Whether ``node`` (``tests/<file>.py::<function>``) names a test function of that file."""
    path, _, name = node.partition("::")
    full = os.path.join(REPO, path)
    if not os.path.isfile(full):
        return False
    with open(full, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    return any(isinstance(n, ast.FunctionDef) and n.name == name for n in tree.body)
