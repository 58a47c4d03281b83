"""Loading an untrusted checkpoint cannot run code or change the loading process.

The issue's attack first (a legacy-format file that sets ``torch._utils._rebuild_tensor_v2.__defaults__`` through
pickle's BUILD), then a fuzz test: random and adversarial pickles built from every opcode the unpickler accepts,
with allowed and disallowed globals, each written as a legacy-format checkpoint and read by ``load_checkpoint``.
Each must either load into plain data (checked by a walker written here) or be refused with one line; a sentinel
global records any call, marker files record side effects, and a snapshot of torch's and the project's module state
(module dicts, functions' code, defaults and attributes, classes' dicts) must be unchanged afterwards. Controls with
Python's unrestricted unpickler show that these checks do catch code that runs and state that changes.

``PETR_FUZZ_CASES`` (default 1500) and ``PETR_FUZZ_SEED`` (default 0) set the budget; run with ``-s`` for the counts.
"""
from __future__ import annotations

import collections
import contextlib
import copyreg
import io
import os
import pickle
import random
import struct
import sys
import types
from collections import Counter
from typing import Any

import pytest
import torch
from tabulate import tabulate
from torch.serialization import MAGIC_NUMBER, PROTOCOL_VERSION

import engine.checkpoint
import engine.restricted_pickle
from engine.checkpoint import load_checkpoint
from engine.errors import CorruptFileError, is_user_error
from engine.restricted_pickle import ALLOWED_GLOBALS

CASES = int(os.environ.get("PETR_FUZZ_CASES", "1500"))
SEED = int(os.environ.get("PETR_FUZZ_SEED", "0"))
CALLS: list[tuple] = []


def sentinel(*args: Any, **kwargs: Any) -> str:
    """A global the fuzz pickles name: called only if unpickling runs a global it should not."""
    CALLS.append((args, kwargs))
    return "called"


SENTINEL = (sentinel.__module__, sentinel.__qualname__)
WATCHED_MODULES = [torch, torch._utils, torch.nn.parameter, torch.serialization, torch._weights_only_unpickler,
                   collections, copyreg, pickle, engine.restricted_pickle, engine.checkpoint, sys.modules[__name__]]


# ----------------------------------------------------------------------------------------------- module state


def _function_state(fn: types.FunctionType) -> tuple:
    return (id(fn.__code__), fn.__defaults__, repr(fn.__kwdefaults__), tuple(sorted((k, id(v)) for k, v in
                                                                                       vars(fn).items())))


def snapshot() -> dict[str, Any]:
    """What a tampering load could change: every watched module's dict, its functions' code/defaults/attributes,
    its classes' dicts (and the nested functions of those classes), copyreg's tables and the loaded modules."""
    state: dict[str, Any] = {"sys.modules": frozenset(sys.modules),
                             "copyreg": (dict(copyreg._extension_registry), dict(copyreg._inverted_registry),
                                         dict(copyreg._extension_cache), dict(copyreg.dispatch_table))}
    for module in WATCHED_MODULES:
        name = module.__name__
        state[name] = {k: id(v) for k, v in vars(module).items() if k not in ("CALLS", "__warningregistry__")}
        for attr, value in list(vars(module).items()):
            if isinstance(value, types.FunctionType):
                state[f"{name}.{attr}()"] = _function_state(value)
            elif isinstance(value, type):
                state[f"{name}.{attr}"] = {k: id(v) for k, v in vars(value).items()}
                for key, member in vars(value).items():
                    if isinstance(member, types.FunctionType):
                        state[f"{name}.{attr}.{key}()"] = _function_state(member)
            elif isinstance(value, torch.dtype):
                state[f"{name}.{attr}:dtype"] = repr(value)
    return state


def changed(before: dict, after: dict) -> list[str]:
    return sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))


# ----------------------------------------------------------------------------------------------- plain data


def plain_problem(obj: Any, where: str = "result") -> str | None:
    """Why ``obj`` is not plain data (containers of tensors, numbers, strings), or None."""
    if isinstance(obj, torch.Tensor):
        if vars(obj) or obj._backward_hooks:
            return f"{where}: tensor with attributes or hooks"
        return None
    if obj is None or type(obj) in (bool, int, float, complex, str, bytes, torch.Size, torch.dtype, torch.device):
        return None
    if type(obj) in (dict, collections.OrderedDict):
        for key, value in obj.items():
            problem = plain_problem(key, f"{where} key") or plain_problem(value, f"{where}[{key!r}]")
            if problem:
                return problem
        return None
    if type(obj) in (list, tuple, set, frozenset):
        return next((p for i, v in enumerate(obj) if (p := plain_problem(v, f"{where}[{i}]"))), None)
    return f"{where}: a {type(obj).__module__}.{type(obj).__qualname__}"


# ----------------------------------------------------------------------------------------------- pickle writing


def legacy_file(payload: bytes) -> bytes:
    """``payload`` (one pickle) as torch's legacy checkpoint format: magic, protocol, system info, the object, the
    (empty) storage keys."""
    f = io.BytesIO()
    for header in (MAGIC_NUMBER, PROTOCOL_VERSION, {"protocol_version": PROTOCOL_VERSION, "little_endian": True,
                                                    "type_sizes": {"short": 2, "int": 4, "long": 4}}):
        pickle.dump(header, f, protocol=2)
    f.write(payload)
    pickle.dump([], f, protocol=2)
    return f.getvalue()


def attack_payload() -> bytes:
    """The issue's attack: only allowed globals, and BUILD with ``(None, {"__defaults__": None})`` on a torch
    function (every later weights_only load then fails)."""
    return (pickle.PROTO + b"\x02" + pickle.EMPTY_DICT + pickle.GLOBAL + b"torch._utils\n_rebuild_tensor_v2\n"
            + pickle.NONE + pickle.EMPTY_DICT + pickle.SHORT_BINUNICODE + b"\x0c__defaults__" + pickle.NONE
            + pickle.SETITEM + pickle.TUPLE2 + pickle.BUILD + pickle.POP + pickle.STOP)


ALLOWED = sorted(ALLOWED_GLOBALS) + [("torch", "float32"), ("torch", "int64"), ("torch", "bfloat16")]
DISALLOWED = [("os", "system"), ("builtins", "exec"), ("builtins", "eval"), ("builtins", "getattr"),
              ("builtins", "setattr"), ("subprocess", "Popen"), ("posix", "mkdir"), ("io", "open"),
              ("torch", "load"), ("torch._utils", "_set_obj_state"), ("engine.restricted_pickle", "Opaque"),
              ("engine.restricted_pickle", "RestrictedUnpickler"), ("copyreg", "add_extension"),
              ("torch.nn.modules.linear", "Linear"), ("collections", "defaultdict"), SENTINEL]
STATE_KEYS = ["__defaults__", "__kwdefaults__", "__code__", "__dict__", "__class__", "__setstate__", "__new__",
              "origin", "data", "requires_grad", "_metadata", "T_max"]


class Fuzzer:
    """Random pickles: structured values, calls and state changes on globals (adversarial), raw opcode soups
    (every opcode the unpickler dispatches on) and byte mutations of both. ``used`` counts the opcodes written."""

    def __init__(self, rng: random.Random, markers: list[str]) -> None:
        self.rng, self.markers, self.used = rng, markers, Counter()
        self.memo = 0

    def op(self, opcode: bytes, arg: bytes = b"") -> bytes:
        self.used[opcode] += 1
        return opcode + arg

    def text(self) -> str:
        return self.rng.choice(["", "a", "state_dict", "epoch", "__defaults__", "é", "x" * 40,
                                *self.markers, "touch " + self.rng.choice(self.markers)])

    def small_int(self) -> int:
        return self.rng.choice([0, 1, 2, -1, 3, 255, 256, 65535, 65536, -70000, 4096])

    def scalar(self) -> bytes:
        n, s = self.small_int(), self.text().encode()
        return self.rng.choice([
            lambda: self.op(pickle.NONE), lambda: self.op(pickle.NEWTRUE), lambda: self.op(pickle.NEWFALSE),
            lambda: self.op(pickle.INT, f"{n}\n".encode()), lambda: self.op(pickle.BININT, struct.pack("<i", n)),
            lambda: self.op(pickle.BININT1, bytes([abs(n) % 256])),
            lambda: self.op(pickle.BININT2, struct.pack("<H", abs(n) % 65536)),
            lambda: self.op(pickle.LONG, f"{n}L\n".encode()),
            lambda: self.op(pickle.LONG1, bytes([2]) + struct.pack("<h", max(-32768, min(32767, n)))),
            lambda: self.op(pickle.LONG4, struct.pack("<i", 2) + struct.pack("<h", max(-32768, min(32767, n)))),
            lambda: self.op(pickle.FLOAT, f"{n / 3}\n".encode()),
            lambda: self.op(pickle.BINFLOAT, struct.pack(">d", n)),
            lambda: self.op(pickle.STRING, repr(s.decode("latin1")).encode("latin1") + b"\n"),
            lambda: self.op(pickle.BINSTRING, struct.pack("<i", len(s)) + s),
            lambda: self.op(pickle.SHORT_BINSTRING, bytes([len(s)]) + s),
            lambda: self.op(pickle.UNICODE, s.decode().encode("raw_unicode_escape") + b"\n"),
            lambda: self.op(pickle.BINUNICODE, struct.pack("<I", len(s)) + s),
            lambda: self.op(pickle.SHORT_BINUNICODE, bytes([len(s)]) + s),
            lambda: self.op(pickle.BINUNICODE8, struct.pack("<Q", len(s)) + s),
            lambda: self.binary(s),
        ])()

    def binary(self, s: bytes) -> bytes:
        """``s`` as bytes or bytearray, with the length field of the opcode chosen."""
        opcode = self.rng.choice([pickle.BINBYTES, pickle.SHORT_BINBYTES, pickle.BINBYTES8, pickle.BYTEARRAY8])
        length = {pickle.SHORT_BINBYTES: bytes([len(s)]), pickle.BINBYTES: struct.pack("<I", len(s))}
        return self.op(opcode, length.get(opcode, struct.pack("<Q", len(s))) + s)

    def global_ref(self, allowed: bool | None = None) -> bytes:
        allowed = self.rng.random() < 0.6 if allowed is None else allowed
        module, name = self.rng.choice(ALLOWED if allowed else DISALLOWED)
        if self.rng.random() < 0.5:
            return self.op(pickle.GLOBAL, f"{module}\n{name}\n".encode())
        m, n = module.encode(), name.encode()
        return (self.op(pickle.SHORT_BINUNICODE, bytes([len(m)]) + m) + self.op(pickle.SHORT_BINUNICODE,
                bytes([len(n)]) + n) + self.op(pickle.STACK_GLOBAL))

    def remember(self) -> bytes:
        """Memoize the top of the stack (PUT / BINPUT / LONG_BINPUT / MEMOIZE), sometimes fetch it back at once."""
        index = self.memo
        self.memo += 1
        put = self.rng.choice([self.op(pickle.PUT, f"{index}\n".encode()), self.op(pickle.BINPUT, bytes([index % 256])),
                               self.op(pickle.LONG_BINPUT, struct.pack("<I", index)), self.op(pickle.MEMOIZE)])
        if self.rng.random() < 0.3:
            get = self.rng.choice([self.op(pickle.GET, f"{index}\n".encode()), self.op(pickle.BINGET,
                                   bytes([index % 256])), self.op(pickle.LONG_BINGET, struct.pack("<I", index))])
            return put + self.op(pickle.POP) + get
        return put

    def value(self, depth: int = 0) -> bytes:
        """One value on the stack: a scalar, a container, a global, or a call / state change of a global."""
        kind = self.rng.choice(["scalar"] * 3 + ["tuple", "list", "dict", "set", "global", "call", "newobj", "build",
                                                  "inst", "dup"] if depth < 3 else ["scalar"])
        if kind == "scalar":
            out = self.scalar()
        elif kind == "tuple":
            items = [self.value(depth + 1) for _ in range(self.rng.randrange(5))]
            fixed = {0: pickle.EMPTY_TUPLE, 1: pickle.TUPLE1, 2: pickle.TUPLE2, 3: pickle.TUPLE3}
            if len(items) in fixed and self.rng.random() < 0.6:
                out = b"".join(items) + self.op(fixed[len(items)])
            else:
                out = self.op(pickle.MARK) + b"".join(items) + self.op(pickle.TUPLE)
        elif kind == "list":
            items = [self.value(depth + 1) for _ in range(self.rng.randrange(4))]
            if self.rng.random() < 0.5:
                out = self.op(pickle.MARK) + b"".join(items) + self.op(pickle.LIST)
            else:
                out = self.op(pickle.EMPTY_LIST) + b"".join(i + self.op(pickle.APPEND) for i in items[:1])
                out += self.op(pickle.MARK) + b"".join(items[1:]) + self.op(pickle.APPENDS)
        elif kind == "dict":
            pairs = [self.scalar() + self.value(depth + 1) for _ in range(self.rng.randrange(4))]
            if self.rng.random() < 0.5:
                out = self.op(pickle.MARK) + b"".join(pairs) + self.op(pickle.DICT)
            else:
                out = self.op(pickle.EMPTY_DICT) + b"".join(p + self.op(pickle.SETITEM) for p in pairs[:1])
                out += self.op(pickle.MARK) + b"".join(pairs[1:]) + self.op(pickle.SETITEMS)
        elif kind == "set":
            items = b"".join(self.scalar() for _ in range(self.rng.randrange(3)))
            out = (self.op(pickle.EMPTY_SET) + self.op(pickle.MARK) + items + self.op(pickle.ADDITEMS)
                   if self.rng.random() < 0.5 else self.op(pickle.MARK) + items + self.op(pickle.FROZENSET))
        elif kind == "global":
            out = self.global_ref()
        elif kind == "call":  # REDUCE, or protocol 0/1's INST / OBJ
            args = [self.value(depth + 1) for _ in range(self.rng.randrange(3))]
            if self.rng.random() < 0.8:
                out = self.global_ref() + self.op(pickle.MARK) + b"".join(args) + self.op(pickle.TUPLE)
                out += self.op(pickle.REDUCE)
            else:
                out = self.op(pickle.MARK) + self.global_ref() + b"".join(args) + self.op(pickle.OBJ)
        elif kind == "inst":
            module, name = self.rng.choice(ALLOWED + DISALLOWED)
            out = self.op(pickle.MARK) + b"".join(self.value(depth + 1) for _ in range(self.rng.randrange(2)))
            out += self.op(pickle.INST, f"{module}\n{name}\n".encode())
        elif kind == "newobj":
            args = b"".join(self.value(depth + 1) for _ in range(self.rng.randrange(2)))
            if self.rng.random() < 0.6:
                out = self.global_ref() + self.op(pickle.MARK) + args + self.op(pickle.TUPLE) + self.op(pickle.NEWOBJ)
            else:
                out = (self.global_ref() + self.op(pickle.MARK) + args + self.op(pickle.TUPLE)
                       + self.op(pickle.EMPTY_DICT) + self.op(pickle.NEWOBJ_EX))
        elif kind == "build":  # set the state of a global (the attack) or of something just created
            target = self.rng.choice([self.global_ref(), self.value(depth + 1)])
            key = self.rng.choice(STATE_KEYS).encode()
            state = self.op(pickle.EMPTY_DICT) + self.op(pickle.SHORT_BINUNICODE, bytes([len(key)]) + key)
            state += self.value(depth + 1) + self.op(pickle.SETITEM)
            if self.rng.random() < 0.5:  # (dict state, slot state): the setattr path
                state = self.op(pickle.NONE) + state + self.op(pickle.TUPLE2)
            out = target + state + self.op(pickle.BUILD)
        else:
            out = self.value(depth + 1) + self.op(pickle.DUP) + self.op(pickle.POP)
        return out + (self.remember() if self.rng.random() < 0.15 else b"")

    def soup(self) -> bytes:
        """A short random opcode sequence, arguments well-formed, the stack not tracked: mostly refused."""
        parts = []
        for _ in range(self.rng.randrange(1, 8)):
            r = self.rng.randrange(12)
            if r < 4:
                parts.append(self.value(2))
            elif r == 4:
                parts.append(self.op(pickle.PERSID, b"0\n") if self.rng.random() < 0.5 else
                             self.scalar() + self.op(pickle.BINPERSID))
            elif r == 5:
                parts.append(self.rng.choice([self.op(pickle.EXT1, bytes([1])), self.op(pickle.EXT2, b"\x01\x00"),
                                              self.op(pickle.EXT4, b"\x01\x00\x00\x00")]))
            elif r == 6:
                parts.append(self.rng.choice([self.op(pickle.NEXT_BUFFER), self.op(pickle.READONLY_BUFFER)]))
            else:
                parts.append(self.op(self.rng.choice([pickle.MARK, pickle.POP, pickle.POP_MARK, pickle.DUP,
                                                      pickle.REDUCE, pickle.BUILD, pickle.APPEND, pickle.SETITEM,
                                                      pickle.TUPLE, pickle.DICT, pickle.NEWOBJ, pickle.STOP])))
        return b"".join(parts)

    def program(self) -> bytes:
        """One pickle: PROTO (sometimes a FRAME), a body, STOP; a third are wrapped as a checkpoint dict."""
        self.memo = 0
        r = self.rng.random()
        body = self.soup() if r < 0.35 else self.value()
        if r >= 0.35 and self.rng.random() < 0.4:
            key = self.rng.choice([b"state_dict", b"epoch", b"scheduler"])
            body = (self.op(pickle.EMPTY_DICT) + self.op(pickle.SHORT_BINUNICODE, bytes([len(key)]) + key) + body
                    + self.op(pickle.SETITEM))
        body += self.op(pickle.STOP)
        if self.rng.random() < 0.3:
            body = self.op(pickle.FRAME, struct.pack("<Q", len(body))) + body
        data = self.op(pickle.PROTO, bytes([self.rng.choice([2, 3, 4, 5])])) + body
        if self.rng.random() < 0.1:  # byte mutations
            raw = bytearray(data)
            for _ in range(self.rng.randrange(1, 4)):
                i = self.rng.randrange(len(raw))
                if self.rng.random() < 0.5:
                    raw[i] = self.rng.randrange(256)
                else:
                    del raw[i]
            data = bytes(raw)
        return data


def reason(error: BaseException) -> str:
    """The kind of refusal, from its one-line message."""
    text = str(error)
    if "BUILD would set the state" in text:
        return "BUILD on a global (refused)"
    if "cannot be read as a checkpoint (" in text:
        return "not readable: " + text.split("cannot be read as a checkpoint (", 1)[1].split(":", 1)[0]
    if "is truncated or corrupt" in text:
        return "torch's reader: truncated or corrupt"
    if "not a checkpoint dict" in text:
        return "not a checkpoint dict"
    if "state_dict holds pickled objects" in text:
        return "objects in state_dict"
    return "other: " + text[:60]


# ----------------------------------------------------------------------------------------------- tests


def _warm_up(tmp_path) -> None:
    """Loads before the snapshot, so lazy imports (torch's, the unpickler's text codec) are not counted as changes."""
    b"x".decode("raw-unicode-escape")
    torch.save({"state_dict": {"w": torch.ones(2)}, "epoch": 1}, tmp_path / "ok.pth")
    load_checkpoint(str(tmp_path / "ok.pth"))
    (tmp_path / "attack.pth").write_bytes(legacy_file(attack_payload()))
    with pytest.raises(CorruptFileError):
        load_checkpoint(str(tmp_path / "attack.pth"))


def test_build_on_a_torch_function_is_refused_and_changes_nothing(tmp_path):
    _warm_up(tmp_path)
    defaults = torch._utils._rebuild_tensor_v2.__defaults__
    before = snapshot()
    path = tmp_path / "attack.pth"
    with pytest.raises(CorruptFileError) as info:
        load_checkpoint(str(path))
    assert is_user_error(info.value) and "\n" not in str(info.value)
    assert str(info.value) == (f"{path} cannot be read as a checkpoint (UnpicklingError: BUILD would set the state of "
                               "_rebuild_tensor_v2, which this load did not create; refused); nothing in it was run: "
                               "restore a good copy or point to another file")
    assert torch._utils._rebuild_tensor_v2.__defaults__ is defaults and changed(before, snapshot()) == []
    torch.save({"w": torch.arange(3)}, tmp_path / "later.pth")  # later weights_only loads still work
    assert torch.equal(torch.load(tmp_path / "later.pth", weights_only=True)["w"], torch.arange(3))


def test_the_checks_catch_what_an_unrestricted_unpickler_does(tmp_path):
    """Controls: Python's plain unpickler runs the sentinel and lets BUILD rewrite the function's defaults; the
    snapshot sees the change (then it is undone)."""
    CALLS.clear()
    call = pickle.PROTO + b"\x02" + pickle.GLOBAL + f"{SENTINEL[0]}\n{SENTINEL[1]}\n".encode() + pickle.EMPTY_TUPLE
    assert pickle.loads(call + pickle.REDUCE + pickle.STOP) == "called" and len(CALLS) == 1
    CALLS.clear()
    fn = torch._utils._rebuild_tensor_v2
    defaults, before = fn.__defaults__, snapshot()
    try:
        pickle._Unpickler(io.BytesIO(attack_payload())).load()
        assert fn.__defaults__ is None and "torch._utils._rebuild_tensor_v2()" in changed(before, snapshot())
    finally:
        fn.__defaults__ = defaults
    assert changed(before, snapshot()) == []


@pytest.mark.filterwarnings("ignore:Detected pickle protocol:UserWarning")
def test_fuzzed_pickles_load_as_plain_data_or_are_refused_in_one_line(tmp_path):
    _warm_up(tmp_path)
    markers = [str(tmp_path / f"marker{i}") for i in range(3)]
    fuzzer = Fuzzer(random.Random(SEED), markers)
    CALLS.clear()
    before = snapshot()
    counts: Counter = Counter()
    path = str(tmp_path / "case.pth")
    for case in range(CASES):
        data = fuzzer.program()
        with open(path, "wb") as f:
            f.write(legacy_file(data))
        try:
            with contextlib.redirect_stdout(io.StringIO()):  # the loader's notes on dropped entries
                result = load_checkpoint(path)
        except Exception as e:  # every exception must be a one-line user error
            assert is_user_error(e), (case, data, repr(e))
            assert "\n" not in str(e) and str(e).strip(), (case, data, repr(e))
            counts[reason(e)] += 1
            continue
        problem = plain_problem(result)
        assert problem is None, (case, data, problem)
        counts["loaded into plain data"] += 1
    assert CALLS == [] and not any(os.path.exists(m) for m in markers), "a pickled global ran"
    assert changed(before, snapshot()) == [], "loading changed module state"
    missing = sorted(pickle._Unpickler.dispatch.keys() - {op[0] for op in fuzzer.used})
    assert missing == [], f"opcodes never written: {[bytes([m]) for m in missing]}"
    rows = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    print(f"\nfuzz: {CASES} pickles (seed {SEED}), {len(fuzzer.used)} opcodes used\n"
          + tabulate(rows + [["total", sum(counts.values())]], headers=["outcome", "cases"], tablefmt="github"))
    assert counts["loaded into plain data"] > 0 and counts["BUILD on a global (refused)"] > 0
