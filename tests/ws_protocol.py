"""A CPU model of the warp-specialized kernel's synchronization (kernels/fwd_gluon_ws.py), run
on the kernel's own source (tests/test_ws_protocol.py).

The kernel cannot run off a GPU, and the interpreter has no warps, mbarriers or named barriers.
Here the Python bodies of ``_producer``, ``_consumer``, their per-tile parts, the dynamic
schedule's ``_claim_tile``, ``_publish_tile`` and ``_handed_tile``, ``_tile_blocks``,
``_num_local_tiles``, ``_schedule_tile``, ``_wait_turn``, ``_pass_turn``, ``_per_thread_ids``
(fwd_gluon_ws.py),
``_key_blocks`` (fwd_gluon.py) and ``tile_coords`` (fwd.py) are executed as they are written
(the files' text with the ``@gluon.jit``/``@triton.jit`` lines dropped), on Python ints, with
Gluon's ops bound to fakes that model what the protocol depends on:

- a thread per warp: per program the producer warp and the 4 warps of each consumer
  warpgroup; a seeded random scheduler lets exactly one warp (or one TMA completion) take a
  step at a time, with random per-warp speeds, so any interleaving of the ops can occur;
- mbarriers: arrival count, tx bytes, completed phases; ``mbarrier.wait`` passes on parity as
  ``mbarrier.try_wait.parity`` does (so a wait can pass on a stale phase: checked below);
- ``mbarrier.arrive`` from a 4-warp partition: a warpgroup barrier, then one thread's arrival
  (the sm_90 PTX: ``bar.sync 0|2|3, 128`` before ``@p mbarrier.arrive``);
- named barriers counted in warps; the turn's ``bar.sync``/``bar.arrive`` and their barrier
  ids are read from the inline PTX text that ``_wait_turn``/``_pass_turn`` pass;
- TMA loads land asynchronously (the scheduler may delay them arbitrarily); the content of a
  shared-memory buffer is the TMA box coordinates it was loaded from;
- the dynamic schedule (``Params.dynamic``): the launch's tile counter, one atomic op per
  step, shared by all programs; each Q buffer's tile-index slot in shared memory;
- wgmma reads its shared-memory operands from issue until ``warpgroup_mma_wait`` retires it;
  data flow is followed through tokens: S = Q·Kᵀ carries (Q box, K box), P carries S's boxes,
  the accumulator the key blocks it summed.

Checks (:class:`SimError` on the first violation):

- no deadlock; no named barrier left with arrivals at the end; every buffer released; the
  tile counter back at 0 at the end (dynamic schedule);
- a buffer is refilled by TMA only after every consumer that reads its content has arrived on
  its "empty" barrier, and a consumer never arrives on "empty" while a wgmma of its still
  reads that buffer; a wgmma reads only a loaded buffer its consumer holds;
- every mbarrier wait passes at the phase it means: a warp's n-th pass on a "ready" barrier
  sees n completed phases, on an "empty" barrier n - 1 (the first passes on the initial phase);
- S of the consumer's own Q rows with K of the same batch and kv head; P·V with the V block of
  P's K block; each output row block below Lq stored exactly once, having summed each key block
  that any of its rows sees exactly once; the unmasked softmax path only for blocks that every
  one of the 64 rows sees whole;
- the turn: each instance of a turn barrier is the 4 syncing warps of consumer c and the 4
  arriving warps of consumer c - 1 (mod n); turns go strictly round robin from consumer 0; no
  consumer enters its turn while another is inside its own; equal turn counts per consumer
  (dynamic schedule: consumer 0 one more, the wait that takes the last pass);
- a consumer's "ready" wait on a Q buffer passes on a load, or (dynamic schedule) on an index
  past the last tile: the end.

``python -m tests.ws_protocol [RUNS] [SEED]`` explores RUNS random scenarios (default 200).
"""

from __future__ import annotations

import dataclasses
import random
import re
import sys
import threading
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

KERNELS = Path(__file__).resolve().parents[1] / "src" / "flashrepro" / "kernels"
WARPS = 4  # warps per consumer warpgroup
ROWS = 64  # query rows per consumer


class SimError(Exception):
    """A protocol violation (or a deadlock) found by the simulation."""


# -- ints that keep Gluon's scalar method ``.to`` through arithmetic ---------------------------

class I(int):  # noqa: E742 - a short name for an int in the kernels' own expressions
    def to(self, *_args: Any, **_kwargs: Any) -> I:
        return I(self)


def _keep(op: str) -> Callable:
    def f(self: I, *args: Any) -> Any:
        r = getattr(int, op)(self, *args)
        return r if r is NotImplemented else I(r)
    return f


for _op in ("add", "radd", "sub", "rsub", "mul", "rmul", "floordiv", "rfloordiv", "mod",
            "rmod", "and", "rand", "or", "ror", "xor", "rxor", "neg", "lt", "le", "gt", "ge",
            "eq", "ne"):
    setattr(I, f"__{_op}__", _keep(f"__{_op}__"))
I.__hash__ = int.__hash__  # type: ignore[method-assign]


class T:
    """A register tensor whose values the protocol does not depend on."""

    def _same(self, *_args: Any, **_kwargs: Any) -> T:
        return self

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = _same
    __rtruediv__ = __lt__ = __gt__ = __le__ = __ge__ = __and__ = to = _same


class Layout:
    def __init__(self, *_args: Any, **_kwargs: Any) -> None:
        pass


# -- the scheduler ---------------------------------------------------------------------------

def _always() -> bool:
    return True


_always.desc = "(runnable)"  # type: ignore[attr-defined]


class _Abort(BaseException):
    pass


class Agent:
    """One warp: a thread that runs only while the scheduler lets it take a step."""

    def __init__(self, sched: Sched, name: str, fn: Callable[[], None],
                 ctx: dict[str, Any]) -> None:
        self.sched, self.name, self.fn, self.ctx = sched, name, fn, ctx
        self.go = threading.Semaphore(0)
        self.ready: Callable[[], bool] | None = None
        self.action: Callable[[], Any] | None = None
        self.result: Any = None
        self.done = False
        self.error: BaseException | None = None
        self.weight = sched.rng.choice([1, 1, 1, 3, 10, 0.2])  # its speed in this run
        self.thread = threading.Thread(target=self._main, daemon=True)

    def _main(self) -> None:
        self.go.acquire()
        self.sched.local.agent = self
        try:
            if not self.sched.aborted:
                self.fn()
        except _Abort:
            pass
        except BaseException as e:  # the scheduler reports it
            self.error = e
        self.done = True
        self.sched.back.release()

    def op(self, ready: Callable[[], bool], action: Callable[[], Any]) -> Any:
        """Post an op (``action`` once ``ready()``), wait until the scheduler has run it."""
        self.ready, self.action = ready, action
        self.sched.back.release()
        self.go.acquire()
        if self.sched.aborted:
            raise _Abort
        return self.result


class Sched:
    """Runs one agent's op or one pending event at a time, chosen at random by weight."""

    def __init__(self, rng: random.Random, max_steps: int = 2_000_000) -> None:
        self.rng = rng
        self.agents: list[Agent] = []
        self.events: list[tuple[float, Callable[[], None]]] = []
        self.back = threading.Semaphore(0)
        self.local = threading.local()
        self.aborted = False
        self.max_steps = max_steps

    def add(self, name: str, fn: Callable[[], None], ctx: dict[str, Any]) -> None:
        self.agents.append(Agent(self, name, fn, ctx))

    @property
    def me(self) -> Agent:
        return self.local.agent

    def event(self, fn: Callable[[], None]) -> None:
        self.events.append((self.rng.choice([1, 1, 0.1, 5]), fn))

    def run(self) -> None:
        try:
            for a in self.agents:
                a.thread.start()
            for a in self.agents:  # each up to its first op
                a.go.release()
                self.back.acquire()
                self._raise(a)
            for _ in range(self.max_steps):
                live = [a for a in self.agents if not a.done]
                choices: list[tuple[float, Any]] = [(a.weight, a) for a in live if a.ready()]
                choices += [(w, ev) for w, ev in self.events]
                if not choices:
                    if live:
                        raise SimError("deadlock: " + "; ".join(
                            f"{a.name} in {getattr(a.ready, 'desc', '?')}" for a in live))
                    return
                x = self.rng.random() * sum(w for w, _ in choices)
                for w, choice in choices:  # noqa: B007 - the one chosen is used below
                    x -= w
                    if x <= 0:
                        break
                if isinstance(choice, Agent):
                    assert choice.action is not None
                    choice.result = choice.action()
                    choice.ready = choice.action = None
                    choice.go.release()
                    self.back.acquire()
                    self._raise(choice)
                else:
                    self.events.remove((w, choice))
                    choice()
            raise SimError("step limit")
        finally:
            self.aborted = True
            for a in self.agents:
                if not a.done:
                    a.go.release()
            for a in self.agents:
                a.thread.join(timeout=5)

    @staticmethod
    def _raise(a: Agent) -> None:
        if a.error is not None:
            raise SimError(f"{a.name}: {type(a.error).__name__}: {a.error}") from a.error


# -- the modelled hardware of one program ------------------------------------------------------

class Buffer:
    """A shared-memory buffer: what it holds and who still has to read it."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.content: tuple | None = None
        self.state = "empty"  # "writing" while its TMA load is in flight, then "loaded"
        self.must_release: set[int] = set()  # consumers yet to arrive on its "empty" barrier
        self.holders: set[int] = set()  # consumers past its "ready" wait, not yet released


class MBar:
    def __init__(self, prog: Program, name: str, count: int, buffer: Buffer) -> None:
        self.prog, self.name, self.count, self.buffer = prog, name, count, buffer
        self.pending, self.tx, self.completed = count, 0, 0
        self.kind = "empty" if "empty" in name else "ready"
        self.slot: Slot | None = None  # q_ready's tile-index slot (dynamic schedule)
        self.passes: dict[str, int] = {}  # warp -> waits it passed

    def arrive(self, tx: int = 0) -> None:
        self.pending -= 1
        self.tx += tx
        if self.pending < 0:
            self.prog.fail(f"{self.name}: more arrivals than its count")
        self._maybe_complete()

    def complete_tx(self, nbytes: int) -> None:
        self.tx -= nbytes
        self._maybe_complete()

    def _maybe_complete(self) -> None:
        if self.pending == 0 and self.tx == 0:
            self.completed += 1
            self.pending = self.count


class NamedBarrier:
    def __init__(self, bid: int, warps: int) -> None:
        self.bid, self.warps = bid, warps
        self.members: list[tuple[str, str]] = []  # (warp, "sync" | "arrive") this instance
        self.history: list[list[tuple[str, str]]] = []  # completed instances

    def join(self, warp: str, how: str, warps: int) -> int:
        if warps != self.warps:
            raise SimError(f"barrier {self.bid} used with {warps} and {self.warps} warps")
        if any(w == warp for w, _ in self.members):
            raise SimError(f"{warp} arrives twice on one instance of barrier {self.bid}")
        self.members.append((warp, how))
        gen = len(self.history)
        if len(self.members) == self.warps:
            self.history.append(self.members)
            self.members = []
        return gen


class Alloc:
    """``allocate_shared_memory``'s result: ``.index(i)``, ``.type.shape``, ``.dtype``."""

    def __init__(self, items: list[Any], shape: list[int]) -> None:
        self.items = items
        self.type = types.SimpleNamespace(shape=shape)
        self.dtype = "fp16"

    def index(self, i: int) -> Any:
        return self.items[int(i)]


class Slot:
    """A Q buffer's tile-index slot (dynamic schedule): ``store`` (one step of its warp, so
    other warps' steps can fall between it and the warp's next op) and ``load`` of one int."""

    def __init__(self, sched: Sched) -> None:
        self.sched = sched
        self.value: int | None = None

    def store(self, value: Any) -> None:
        self.sched.me.op(_always, lambda: setattr(self, "value", int(value)))

    def load(self, _layout: Any) -> I:
        if self.value is None:
            raise SimError("a tile-index slot read before any write")
        return I(self.value)


class View:
    """A shared-memory operand: ``reshape``/``permute`` keep the buffer."""

    def __init__(self, prog: Program, buf: Buffer) -> None:
        self.prog, self.buf = prog, buf

    def reshape(self, *_args: Any) -> View:
        return self

    permute = reshape


class Program:
    """Shared memory, barriers and turn bookkeeping of one program (CTA)."""

    def __init__(self, pid: int, p: Params, sched: Sched) -> None:
        self.pid = pid
        n = p.consumers
        self.named: dict[int, NamedBarrier] = {}
        self.turns: list[int] = []
        self.in_turn: dict[str, int] = {}  # warp -> its consumer, while inside its turn
        self.counted: set[tuple[int, int]] = set()  # turn-barrier instances checked
        bufs = {name: [Buffer(f"p{pid}.{name}[{i}]") for i in range(size)]
                for name, size in (("q", n * 2), ("k", p.stages), ("v", p.stages))}
        self.smem = {"q": Alloc([View(self, b) for b in bufs["q"]], [n * 2, 1, 1, ROWS, 64]),
                     "o": Alloc([View(self, Buffer(f"p{pid}.o[{c}]")) for c in range(n)],
                                [n, 1, 1, ROWS, 64]),
                     "k": Alloc([View(self, b) for b in bufs["k"]],
                                [p.stages, 1, 1, p.block_n, 64]),
                     "v": Alloc([View(self, b) for b in bufs["v"]],
                                [p.stages, 1, 1, p.block_n, 64])}
        self.bars = tuple(
            Alloc([MBar(self, f"p{pid}.{kind}_{role}[{i}]", n if role == "empty" and
                        kind != "q" else 1, b) for i, b in enumerate(bufs[kind])], [])
            for kind, role in (("q", "ready"), ("q", "empty"), ("k", "ready"), ("v", "ready"),
                               ("k", "empty"), ("v", "empty")))
        self.buffers = [b for bs in bufs.values() for b in bs]
        slots = [Slot(sched) for _ in range(n * 2)]
        self.tile_smem = Alloc(slots, [n * 2, 1])
        for bar, slot in zip(self.bars[0].items, slots, strict=True):
            bar.slot = slot  # q_ready[i] guards slot i

    def fail(self, msg: str) -> None:
        raise SimError(f"program {self.pid}: {msg}")

    def barrier(self, bid: int, warps: int) -> NamedBarrier:
        return self.named.setdefault(bid, NamedBarrier(bid, warps))


@dataclasses.dataclass(frozen=True)
class Desc:
    """A TMA descriptor: the tensor's name and its box's rows."""

    name: str
    rows: int

    @property
    def block_type(self) -> types.SimpleNamespace:
        return types.SimpleNamespace(shape=[1, 1, self.rows, 64], nbytes=self.rows * 128)


@dataclasses.dataclass(frozen=True)
class STok:
    q: tuple
    k: tuple


@dataclasses.dataclass(frozen=True)
class PTok:
    q: tuple
    k: tuple

    def to(self, *_args: Any) -> PTok:
        return self


@dataclasses.dataclass(frozen=True)
class AccTok:
    q: tuple
    keys: tuple[int, ...]

    def __mul__(self, _other: Any) -> AccTok:
        return self


@dataclasses.dataclass(frozen=True)
class Params:
    """A launch: shape, mask, tiles and the persistent grid (``programs`` <= tiles)."""

    batch: int
    heads: int
    kv_heads: int
    seqlen_q: int
    seqlen_k: int
    causal: bool
    causal_offset: int  # >= 0: the launcher sends only such masks to the Gluon kernels
    block_n: int
    stages: int
    consumers: int
    programs: int
    heads_per_group: int = 1
    dynamic: bool = False  # the dynamic schedule (tiles claimed from a counter)
    split: bool = False  # the split tail (no causal mask, static schedule)

    @property
    def tiles(self) -> int:
        return self.batch * self.heads * -(-self.seqlen_q // (ROWS * self.consumers))


# -- the kernel's functions, built from their source with the fakes bound in -----------------

def _source_namespace(path: Path, replace: tuple[tuple[str, str], ...] = ()) -> dict:
    """Exec a kernel module's text without its JIT decorators, after ``replace`` (each old
    text must occur exactly once)."""
    src = path.read_text()
    for old, new in replace:
        if src.count(old) != 1:
            raise ValueError(f"{old!r} occurs {src.count(old)} times in {path.name}")
        src = src.replace(old, new)
    src = re.sub(r"^@(gluon|triton)\.jit(\(.*\))?\n", "", src, flags=re.MULTILINE)
    ns: dict = {"__name__": f"ws_protocol_{path.stem}"}
    exec(compile(src, str(path), "exec"), ns)  # this repository's own kernels
    return ns


class Sim:
    """One run of ``p`` under one seed; ``replace``: text edits of fwd_gluon_ws.py (mutants).
    ``strict`` also flags a consumer's arrival on "empty" before its wait on "ready" (a rule of
    the protocol rather than a hazard of its own; mutants run without it, so they are caught
    by what the early arrival breaks)."""

    def __init__(self, p: Params, seed: int, replace: tuple[tuple[str, str], ...] = (),
                 strict: bool = True) -> None:
        self.p, self.strict = p, strict
        self.rng = random.Random(seed)
        self.sched = Sched(self.rng)
        self.stores: list[tuple[int, int, int, int, int, Any]] = []
        self.softmax_calls: list[tuple[tuple, tuple, bool]] = []
        self.progs: list[Program] = []
        self.counter = 0  # the dynamic schedule's tile counter, 0 at launch
        # the split tail: each split tile's parts as they finish, by (batch, head, row0)
        self.parts: dict[tuple[int, int, int], list[tuple[int, int, int, AccTok]]] = {}
        ws = _source_namespace(KERNELS / "fwd_gluon_ws.py", replace)
        # the ROW_MAX_TREE the kernel derives for this launch; every softmax call must get it
        self.row_max_tree = ws["row_max_tree"](p.consumers, p.block_n)
        scope = {**ws, "gl": self._fake_gl(),
                 "mbarrier": types.SimpleNamespace(wait=self._wait, arrive=self._arrive,
                                                   expect=self._expect),
                 "tma": types.SimpleNamespace(async_copy_global_to_shared=self._tma_load,
                                              store_wait=lambda pendings=0: None),
                 "warpgroup_mma": self._mma, "warpgroup_mma_wait": self._mma_wait,
                 "_softmax_block": self._softmax, "store_output": self._store,
                 "_finish_part": self._finish_part,
                 "_rescale_moved_rows": lambda acc, _alpha, _m_old, _m_new: acc,
                 "MAX_LAG": ws["MAX_LAG"].value,
                 "CONSUMER_ROWS": ROWS, "Q_BUFFERS": 2, "TURN_BARRIER": int(ws["TURN_BARRIER"])}
        scope["tl"] = types.SimpleNamespace(cdiv=scope["gl"].cdiv, minimum=scope["gl"].minimum)
        sources = [(_source_namespace(KERNELS / "fwd.py"), "tile_coords"),
                   (_source_namespace(KERNELS / "fwd_gluon.py"), "_key_blocks")]
        sources += [(ws, name) for name in ("_per_thread_ids", "_wait_turn", "_pass_turn",
                                            "_tile_blocks", "_num_local_tiles",
                                            "_schedule_tile", "_claim_tile", "_publish_tile",
                                            "_handed_tile", "_split_tail", "_tail_segment",
                                            "_load_tile", "_producer",
                                            "_consumer_tile", "_consumer")]
        self.fn: dict[str, Callable] = {}
        for ns, name in sources:
            f = ns[name]
            self.fn[name] = types.FunctionType(f.__code__, scope, name, f.__defaults__,
                                               f.__closure__)
        scope.update(self.fn)

    # -- gl --------------------------------------------------------------------------------
    def _fake_gl(self) -> types.SimpleNamespace:
        gl = types.SimpleNamespace(
            constexpr=lambda x: x, float32="f32", int32="i32", int64="i64",
            NVMMADistributedLayout=Layout, DotOperandLayout=Layout, SliceLayout=Layout,
            BlockedLayout=Layout, arange=lambda *a, **k: T(), zeros=lambda *a, **k: T(),
            convert_layout=lambda x, _layout: x, expand_dims=lambda _x, _axis: T(),
            static_range=lambda *a: range(*(int(x) for x in a)),
            cdiv=lambda a, b: I(-(-int(a) // int(b))),
            minimum=lambda a, b: I(min(int(a), int(b))),
            maximum=lambda a, b: I(max(int(a), int(b))),
            num_programs=lambda _axis: I(self.p.programs),
            program_id=lambda _axis: I(self.sched.me.ctx["pid"]),
            inline_asm_elementwise=self._inline_asm,
            atomic_add=self._atomic_add, atomic_xchg=self._atomic_xchg,
            max=lambda x, axis=None: x)
        # _per_thread_ids: gl.full([128], barrier_id, gl.int32, ...) is the barrier id
        gl.full = lambda _shape, value, dtype, layout=None: I(value) if dtype == "i32" else T()
        return gl

    # -- the dynamic schedule's counter ------------------------------------------------------
    def _atomic_add(self, ptr: Any, value: Any, sem: str | None = None) -> I:
        """One atomic step; the protocol asks nothing of it but atomicity (``sem`` any)."""
        assert ptr == "tile_counter"

        def add() -> I:
            old, self.counter = self.counter, self.counter + int(value)
            return I(old)
        return self.sched.me.op(_always, add)

    def _atomic_xchg(self, ptr: Any, value: Any, sem: str | None = None) -> I:
        assert ptr == "tile_counter"

        def xchg() -> I:
            old, self.counter = self.counter, int(value)
            return I(old)
        return self.sched.me.op(_always, xchg)

    # -- named barriers --------------------------------------------------------------------
    def _inline_asm(self, asm: str, _constraints: str, args: list, **_kwargs: Any) -> T:
        (bid,) = args
        for inst in (s.strip() for s in asm.split(";") if s.strip()):
            m = re.fullmatch(r"bar\.(sync|arrive) \$1, (\d+)", inst)
            if m:
                self._named(m.group(1), int(bid), int(m.group(2)) // 32)
            elif not re.fullmatch(r"mov\.b32 \$0, \$1", inst):
                raise SimError(f"inline PTX not modelled: {inst!r}")
        return T()

    def _named(self, how: str, bid: int, warps: int) -> None:
        me = self.sched.me
        prog: Program = me.ctx["prog"]
        c = me.ctx.get("consumer")
        bar = prog.barrier(bid, warps)
        turn = 8 <= bid < 8 + self.p.consumers

        def join() -> int:
            if turn and how == "arrive":  # leaving its turn (or consumer n-1's first pass)
                first = not me.ctx.get("passed") and c == self.p.consumers - 1
                me.ctx["passed"] = True
                if prog.in_turn.pop(me.name, None) is None and not first:
                    prog.fail(f"{me.name} passes a turn it does not hold")
            return bar.join(me.name, how, warps)
        gen = me.op(_always, join)
        if how == "arrive":
            return

        def released() -> bool:
            return len(bar.history) > gen
        released.desc = f"bar.sync {bid}"  # type: ignore[attr-defined]

        def enter() -> None:
            if turn:
                self._check_turn(prog, bid, bar.history[gen], gen)
                others = {cc for cc in prog.in_turn.values() if cc != c}
                if others:
                    prog.fail(f"{me.name} enters its turn while consumer(s) {others} are in "
                              "theirs")
                prog.in_turn[me.name] = c
        me.op(released, enter)

    def _check_turn(self, prog: Program, bid: int, inst: list, gen: int) -> None:
        n, c = self.p.consumers, bid - 8
        if (bid, gen) in prog.counted:
            return
        prog.counted.add((bid, gen))
        syncs = sorted(w for w, h in inst if h == "sync")
        arrives = sorted(w for w, h in inst if h == "arrive")
        if (syncs != [f"p{prog.pid}.c{c}.w{w}" for w in range(WARPS)]
                or arrives != [f"p{prog.pid}.c{(c - 1) % n}.w{w}" for w in range(WARPS)]):
            prog.fail(f"turn barrier {bid}: syncs {syncs}, arrives {arrives}")
        want = (prog.turns[-1] + 1) % n if prog.turns else 0
        if c != want:
            prog.fail(f"turn {len(prog.turns)} taken by consumer {c}, not {want}")
        prog.turns.append(c)

    # -- mbarriers -------------------------------------------------------------------------
    def _wait(self, bar: MBar, phase: int) -> None:
        me = self.sched.me
        parity = int(phase)

        def passed() -> bool:
            return (bar.completed & 1) != parity
        passed.desc = f"mbarrier.wait {bar.name} parity {parity}"  # type: ignore[attr-defined]

        def on_pass() -> None:
            n = bar.passes[me.name] = bar.passes.get(me.name, 0) + 1
            want = n if bar.kind == "ready" else n - 1
            if bar.completed != want:
                bar.prog.fail(f"{me.name}: wait {n} on {bar.name} passed at {bar.completed} "
                              f"completed phases, not {want} (parity alias)")
            c = me.ctx.get("consumer")
            end = bar.slot is not None and bar.slot.value is not None and (
                bar.slot.value >= self.p.tiles)
            if bar.kind == "ready" and c is not None and not end:
                buf = bar.buffer
                if buf.state != "loaded" or c not in buf.must_release:
                    bar.prog.fail(f"{me.name}: {bar.name} passed on {buf.name} = "
                                  f"{buf.content} ({buf.state}), not a load consumer {c} "
                                  "has yet to read")
                buf.holders.add(c)
        me.op(passed, on_pass)

    def _arrive(self, bar: MBar, count: int = 1) -> None:
        assert int(count) == 1
        me = self.sched.me
        c = me.ctx.get("consumer")
        if c is not None:
            if any(bar.buffer in group for group in me.ctx.setdefault("mma", [])):
                bar.prog.fail(f"{me.name} arrives on {bar.name} while its wgmma still reads "
                              f"{bar.buffer.name}")
            self._named("sync", 100 + c, WARPS)  # Gluon's warpgroup barrier, then 1 thread
            if me.ctx["warp"] != 0:
                return

        def act() -> None:
            buf = bar.buffer
            if c is not None and bar.kind == "empty":
                if self.strict and not (c in buf.must_release and c in buf.holders):
                    bar.prog.fail(f"{me.name} arrives on {bar.name} without having waited "
                                  f"for {buf.name}'s load")
                buf.must_release.discard(c)
                buf.holders.discard(c)
            bar.arrive()
        me.op(_always, act)

    def _expect(self, bar: MBar, nbytes: int, pred: bool = True) -> None:
        assert pred is True
        self.sched.me.op(_always, lambda: bar.arrive(tx=int(nbytes)))

    def _tma_load(self, desc: Desc, coords: list, bar: MBar, view: View,
                  pred: bool = True) -> None:
        assert pred is True
        buf = view.buf
        if bar.buffer is not buf:
            bar.prog.fail(f"TMA into {buf.name} completes {bar.name}")
        content = (desc.name, tuple(int(x) for x in coords))
        readers = ({int(buf.name.split("[")[1][:-1]) // 2} if desc.name == "q"
                   else set(range(self.p.consumers)))

        def issue() -> None:
            if buf.must_release or buf.state == "writing":
                bar.prog.fail(f"TMA refills {buf.name} with {content} while consumers "
                              f"{sorted(buf.must_release)} have not released {buf.content}")
            buf.content, buf.state, buf.must_release = content, "writing", set(readers)

            def land() -> None:
                buf.state = "loaded"
                bar.complete_tx(desc.block_type.nbytes)
            self.sched.event(land)
        self.sched.me.op(_always, issue)

    # -- wgmma, softmax, epilogue ----------------------------------------------------------
    @staticmethod
    def _read(me: Agent, view: View) -> tuple:
        buf, c = view.buf, me.ctx["consumer"]
        if buf.state != "loaded" or c not in buf.holders or c not in buf.must_release:
            view.prog.fail(f"{me.name}: wgmma reads {buf.name} = {buf.content} ({buf.state}) "
                           "without holding it")
        assert buf.content is not None
        return buf.content

    def _mma(self, a: Any, b: View, acc: Any, use_acc: bool = True,
             is_async: bool = True) -> Any:
        me = self.sched.me

        def issue() -> Any:
            group = [b.buf]
            kv = self._read(me, b)
            if isinstance(a, View):
                group.append(a.buf)
                q = self._read(me, a)
                if q[0] != "q" or kv[0] != "k":
                    b.prog.fail(f"{me.name}: S from {q} and {kv}")
                result: Any = STok(q, kv)
            else:
                if not isinstance(a, PTok) or kv[0] != "v" or kv[1] != a.k[1]:
                    b.prog.fail(f"{me.name}: P {a!r} times V {kv}")
                if isinstance(acc, AccTok) and acc.q != a.q:
                    b.prog.fail(f"{me.name}: rows {a.q} summed into {acc.q}")
                keys = acc.keys if isinstance(acc, AccTok) else ()
                result = AccTok(a.q, (*keys, kv[1][2]))
            me.ctx.setdefault("mma", []).append(group)
            return result
        return me.op(_always, issue)

    def _mma_wait(self, n: int, deps: tuple = ()) -> Any:
        pending = self.sched.me.ctx.setdefault("mma", [])
        del pending[:max(0, len(pending) - int(n))]  # the oldest groups retire first
        return deps[0]

    def _softmax(self, s: Any, _m: Any, _l: Any, _cols: Any, _rows: Any, full: Any,
                 *rest: Any) -> tuple:
        if not isinstance(s, STok):
            raise SimError(f"softmax of {s!r}")
        # (seqlen_k, causal_offset, qk_scale, CAUSAL, MAX_LAG, TREE): the launch's tree flag
        if len(rest) != 6 or rest[-1] is not self.row_max_tree:
            raise SimError(f"softmax without the launch's ROW_MAX_TREE "
                           f"({self.row_max_tree}): {rest!r}")
        self.softmax_calls.append((s.q, s.k, bool(full)))
        return PTok(s.q, s.k), T(), T(), T()

    def _store(self, acc: Any, _m: Any, _l: Any, row0: int, _rows: Any, _o: Any, _desc: Any,
               off_b: int, off_h: int, *_rest: Any) -> None:
        me = self.sched.me
        if me.ctx["warp"] == 0:
            self.stores.append((me.ctx["pid"], me.ctx["consumer"], int(off_b), int(off_h),
                                int(row0), acc))

    def _finish_part(self, acc: Any, m: Any, l_i: Any, row0: int, rows: Any, o: Any,
                     desc: Any, off_b: int, off_h: int, *rest: Any) -> None:
        """The split tail's epilogue, by its contract: a whole tile stores; of a split tile's
        two parts (warp 0 of each consumer recording) the second stores both parts' sums. The
        parts must name each other's slots and one ticket, inside the launch's scratch
        (2·G·consumers slots) and tickets (one per tail tile and consumer)."""
        *_, split, whole = rest
        if whole:
            self._store(acc, m, l_i, row0, rows, o, desc, off_b, off_h)
            return
        me = self.sched.me
        if me.ctx["warp"] != 0:
            return
        _, _, mine, other, ticket = split
        p = self.p
        rounds = p.tiles // p.programs - (p.tiles % p.programs != 0)
        slots, tickets = 2 * p.programs * p.consumers, (p.tiles - rounds * p.programs) * p.consumers
        if not (0 <= mine < slots and 0 <= other < slots and 0 <= ticket < tickets):
            raise SimError(f"rows ({off_b}, {off_h}, {row0}): slots {mine}, {other} of {slots}, "
                           f"ticket {ticket} of {tickets}")
        parts = self.parts.setdefault((int(off_b), int(off_h), int(row0)), [])
        parts.append((int(mine), int(other), int(ticket), acc))
        if len(parts) == 2:
            (m0, o0, t0, a0), (m1, o1, t1, a1) = parts
            if (m0, t0) != (o1, t1) or o0 != m1 or m0 == m1:
                raise SimError(f"parts of rows ({off_b}, {off_h}, {row0}) name slots and "
                               f"tickets {(m0, o0, t0)} and {(m1, o1, t1)}")
            if not (isinstance(a0, AccTok) and isinstance(a1, AccTok) and a0.q == a1.q):
                raise SimError(f"parts of rows ({off_b}, {off_h}, {row0}): {a0}, {a1}")
            self._store(AccTok(a0.q, a0.keys + a1.keys), m, l_i, row0, rows, o, desc, off_b,
                        off_h)
        elif len(parts) > 2:
            raise SimError(f"rows ({off_b}, {off_h}, {row0}) finished in {len(parts)} parts")

    # -- a run -----------------------------------------------------------------------------
    def run(self) -> None:
        """Launch every program's warps, run to the end, check (SimError on a violation)."""
        p = self.p
        descs = (Desc("q", ROWS), Desc("k", p.block_n), Desc("v", p.block_n), Desc("o", ROWS))
        shape = (p.batch, p.heads, p.heads // p.kv_heads, p.heads_per_group, p.seqlen_q,
                 p.seqlen_k, p.causal_offset)
        for pid in range(p.programs):
            prog = Program(pid, p, self.sched)
            self.progs.append(prog)
            s = prog.smem
            producer = (*descs[:3], s["q"], s["k"], s["v"], prog.bars, *shape, p.tiles,
                        p.causal, *(("tile_counter", prog.tile_smem) if p.dynamic else ()),
                        *(("tile_counter",) if p.split else ()))
            self.sched.add(f"p{pid}.producer", lambda a=producer: self.fn["_producer"](*a),
                           {"pid": pid, "prog": prog})
            for c in range(p.consumers):
                args = (descs[3], None, s["q"], s["k"], s["v"], s["o"], prog.bars, 0, 0,
                        *shape, 1.0, p.tiles, c, p.causal, False,
                        *((prog.tile_smem,) if p.dynamic else ()),
                        *((None, "tile_counter", "partials") if p.split else ()))
                for w in range(WARPS):
                    self.sched.add(f"p{pid}.c{c}.w{w}",
                                   lambda a=args: self.fn["_consumer"](*a),
                                   {"pid": pid, "prog": prog, "consumer": c, "warp": w})
        self.sched.run()
        self._check_end()

    def _check_end(self) -> None:
        p = self.p
        for prog in self.progs:
            for bid, bar in prog.named.items():
                if bar.members:
                    prog.fail(f"named barrier {bid} left with {bar.members} at the end")
            counts = [prog.turns.count(c) for c in range(p.consumers)]
            counts[0] -= p.dynamic  # consumer 0's wait for the last pass
            if len(set(counts)) != 1:
                prog.fail(f"turns per consumer {counts}")
            for buf in prog.buffers:
                if buf.must_release or buf.state == "writing":
                    prog.fail(f"{buf.name} = {buf.content} never released by "
                              f"{sorted(buf.must_release)}")
        if self.counter != 0:
            raise SimError(f"the tile counter ends at {self.counter}, not 0")
        for rows, parts in self.parts.items():
            if len(parts) != 2:
                raise SimError(f"rows {rows} ended with {len(parts)} of 2 parts")
        group = p.heads // p.kv_heads
        stored: dict[tuple[int, int, int], AccTok] = {}
        for pid, c, b, h, row0, acc in self.stores:
            if not isinstance(acc, AccTok) or acc.q != ("q", (b, h, row0, 0)):
                raise SimError(f"p{pid}.c{c} stores rows ({b}, {h}, {row0}) from {acc}")
            if row0 >= p.seqlen_q:
                continue  # the copy engine drops rows past Lq
            if (b, h, row0) in stored:
                raise SimError(f"rows ({b}, {h}, {row0}) stored twice")
            stored[(b, h, row0)] = acc
            keys = list(acc.keys)
            need = visible_blocks(row0, p)
            if len(keys) != len(set(keys)) or not need <= set(keys) or max(keys) >= p.seqlen_k:
                raise SimError(f"rows ({b}, {h}, {row0}) summed key blocks {keys}, "
                               f"need {sorted(need)}")
        want = {(b, h, r) for b in range(p.batch) for h in range(p.heads)
                for r in range(0, p.seqlen_q, ROWS)}
        if set(stored) != want:
            raise SimError(f"row blocks stored {sorted(stored)} != {sorted(want)}")
        for q, k, full in self.softmax_calls:
            (qb, qh, row0, _), (kb, kh, key0, _) = q[1], k[1]
            if (kb, kh) != (qb, qh // group):
                raise SimError(f"S of {q} with {k}: another batch or kv head")
            if full and not (key0 + p.block_n <= p.seqlen_k and (
                    not p.causal or key0 + p.block_n - 1 <= row0 + p.causal_offset)):
                raise SimError(f"key block {key0} unmasked for rows {row0}..{row0 + 63}")


def visible_blocks(row0: int, p: Params) -> set[int]:
    """First keys of the blocks holding a key that a row in [row0, row0 + 64) below Lq sees."""
    out = set()
    for r in range(row0, min(row0 + ROWS, p.seqlen_q)):
        last = min(p.seqlen_k - 1, r + p.causal_offset) if p.causal else p.seqlen_k - 1
        out.update(range(0, last + 1, p.block_n))
    return out


def random_params(rng: random.Random, consumers: int | None = None,
                  dynamic: bool = False, split: bool = False) -> Params:
    """A small random launch: 2 or 3 consumers, BLOCK_N 64/128 with the stages its config
    allows, GQA, ragged Lq and Lk, causal top-left or bottom-right (offset >= 0), 1-5 tiles
    per program, any head-group size; the static schedule, or the dynamic one."""
    n = consumers or rng.choice([2, 3])
    block_n = rng.choice([64, 128])
    stages = rng.choice([s for s in (2, 3, 4) if s * block_n <= (256 if n == 2 else 512)])
    heads = rng.choice([1, 2, 3, 4])
    kv_heads = rng.choice([d for d in range(1, heads + 1) if heads % d == 0])
    batch = rng.choice([1, 2])
    tile = ROWS * n
    lq = rng.choice([rng.randint(1, 3 * tile), rng.randint(1, ROWS), tile * rng.randint(1, 3),
                     tile * rng.randint(1, 3) + rng.randint(1, ROWS - 1)])
    causal = rng.random() < 0.6 and not split
    lk = rng.choice([lq, rng.randint(1, 3 * tile), lq + rng.randint(0, 200)])
    offset = 0
    if causal and rng.random() < 0.5:
        lk = max(lk, lq + rng.randint(0, 150))
        offset = lk - lq
    while batch * heads * -(-lq // tile) > 12 and batch * heads > 1:  # keep a run small
        heads, kv_heads, batch = (heads - 1, 1, batch) if heads > 1 else (heads, 1, batch - 1)
    tiles = batch * heads * -(-lq // tile)
    programs = max(1, -(-tiles // rng.randint(1, 5)))
    if split:  # blocks to split, and a remainder: fewer programs than tiles, not a divisor
        lk = max(lk, rng.randint(2, 4) * block_n + rng.randint(0, block_n - 1))
        programs = next((g for g in range(min(programs, tiles - 1), 0, -1) if tiles % g), 1)
    return Params(batch, heads, kv_heads, lq, lk, causal, offset, block_n, stages, n,
                  programs, rng.randint(1, batch * heads), dynamic, split)


def main(argv: list[str]) -> int:
    runs = int(argv[0]) if argv else 200
    seed = int(argv[1]) if len(argv) > 1 else 0
    rng = random.Random(seed)
    for i in range(runs):
        p = random_params(rng)
        try:
            Sim(p, seed * 1_000_003 + i).run()
        except SimError as e:
            print(f"run {i}: {p}\n  {e}")
            return 1
    print(f"{runs} runs ok")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
