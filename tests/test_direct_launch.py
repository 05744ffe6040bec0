"""The direct launch (:mod:`flashrepro.direct`) against a stand-in for Triton's C launcher: the
arguments it passes, what it encodes once, and what it passes when a launch hook is registered.

The GPU cases of ``tests/test_launch_plans.py`` run it against the real launcher; these pin its
argument handling on any machine, with no GPU and no compiled kernel.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch
from triton import knobs

from flashrepro import direct, launch
from flashrepro.direct import DirectLaunch


class Recorder:
    """Stands in for the C launcher: keeps each call's positional arguments."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def __call__(self, *args: Any) -> None:
        self.calls.append(args)


class Template:
    """A TMA descriptor template (the fields ``with_base`` copies)."""

    def __init__(self) -> None:
        self.base = None
        self.block_shape = [64, 128]


def _encoder(log: list[int]) -> Any:
    def make_tensordesc_arg(desc: Any, meta: Any) -> list[Any]:
        log.append(desc.base.data_ptr())
        return [("map", desc.base.data_ptr(), meta), 7, 8]
    return make_tensordesc_arg


def _launch(monkeypatch: pytest.MonkeyPatch, log: list[int]) -> tuple[DirectLaunch, Recorder]:
    monkeypatch.setattr(direct, "make_tensordesc_arg", _encoder(log))
    raw = Recorder()
    compiled = SimpleNamespace(function=1234, packed_metadata=(4, 1, 0),
                               metadata=SimpleNamespace(tensordesc_meta=["meta-q"]),
                               launch_metadata=lambda *a: ("metadata", a))
    launcher = SimpleNamespace(launch_cooperative_grid=False, launch_pdl=True)
    return DirectLaunch(raw, compiled, launcher, (Template(), None), [3, 0.5]), raw


def test_arguments_pointers_as_ints_and_no_hooks(monkeypatch: pytest.MonkeyPatch) -> None:
    log: list[int] = []
    dl, raw = _launch(monkeypatch, log)
    q, lse = torch.zeros(4), torch.zeros(2)
    dl((5, 1, 1), 99, (q, lse))
    (args,) = raw.calls
    assert args == (5, 1, 1, 99, 1234, False, True, None, None, (4, 1, 0), None, None, None,
                    ("map", q.data_ptr(), "meta-q"), 7, 8, lse.data_ptr(), 3, 0.5)
    assert not any(isinstance(a, torch.Tensor) for a in args), "a tensor reached the launcher"


def test_descriptors_encoded_once_per_address(monkeypatch: pytest.MonkeyPatch) -> None:
    log: list[int] = []
    dl, raw = _launch(monkeypatch, log)
    q1, q2, lse = torch.zeros(4), torch.zeros(4), torch.zeros(2)
    for q in (q1, q2, q1, q2, q1):
        dl((5, 1, 1), 99, (q, lse))
    assert log == [q1.data_ptr(), q2.data_ptr()] and dl.encodes == 2
    assert [c[13][1] for c in raw.calls] == [t.data_ptr() for t in (q1, q2, q1, q2, q1)]
    dl((5, 1, 1), 100, (q1, lse))  # another stream: new arguments, the same descriptor
    assert raw.calls[-1][3] == 100 and dl.encodes == 2


def test_a_registered_hook_gets_its_metadata(monkeypatch: pytest.MonkeyPatch) -> None:
    log: list[int] = []
    dl, raw = _launch(monkeypatch, log)
    q, lse = torch.zeros(4), torch.zeros(2)
    dl((5, 1, 1), 99, (q, lse))  # cached without hooks first
    seen: list[Any] = []
    knobs.runtime.launch_enter_hook.add(seen.append)
    try:
        dl((5, 1, 1), 99, (q, lse))
    finally:
        knobs.runtime.launch_enter_hook.remove(seen.append)
    args = raw.calls[-1]
    assert args[10][0] == "metadata" and args[11] is knobs.runtime.launch_enter_hook
    assert args[12] is knobs.runtime.launch_exit_hook
    dl((5, 1, 1), 99, (q, lse))  # hooks gone: the cached arguments again
    assert raw.calls[-1] == raw.calls[0]


def test_disable_mma_v3_keys_the_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    """Triton reads DISABLE_MMA_V3 when it compiles, so a plan made without it must not serve
    a call with it (the key reads os.environ's own dict, which setenv updates)."""
    q = torch.zeros(1, 1, 4, 16, dtype=torch.float16)
    monkeypatch.setenv("TRITON_INTERPRET", "1")

    def key() -> Any:
        return launch._signature(q, q, q, False, None, False, "top_left", False, None)
    monkeypatch.delenv("DISABLE_MMA_V3", raising=False)
    without = key()
    monkeypatch.setenv("DISABLE_MMA_V3", "1")
    assert key() != without
    monkeypatch.delenv("DISABLE_MMA_V3")
    assert key() == without


def test_a_descriptor_slot_without_metadata_keeps_no_tensor() -> None:
    """A descriptor slot whose kernel carries no ``tensordesc_meta`` entry (Triton then passes
    the descriptor as base pointer, shape and strides: ``make_tensordesc_arg(desc, None)``
    returns the base tensor itself) must reach the launcher as the base's address, and neither
    the slot's cache nor the cached argument tuple may keep the tensor alive."""
    import gc
    import weakref

    from triton.tools.tensor_descriptor import TensorDescriptor

    from flashrepro.kernels.call import io_templates

    if direct.make_tensordesc_arg is None:
        pytest.skip("Triton's NVIDIA launcher pieces are not importable")
    raw = Recorder()
    compiled = SimpleNamespace(function=1234, packed_metadata=(4, 1, 0),
                               metadata=SimpleNamespace(tensordesc_meta=None),
                               launch_metadata=lambda *a: ("metadata", a))
    launcher = SimpleNamespace(launch_cooperative_grid=False, launch_pdl=False)
    q = torch.randn(1, 2, 64, 64).to(torch.float16)
    lse = torch.zeros(2)
    templates = io_templates((TensorDescriptor.from_tensor(q, [1, 1, 16, 64]), lse))
    dl = DirectLaunch(raw, compiled, launcher, templates, [3])
    address = q.data_ptr()
    dl((4, 1, 1), 99, (q, lse))
    (args,) = raw.calls
    assert not any(isinstance(a, torch.Tensor) for a in args), "a tensor reached the launcher"
    assert args[13] == address and args[14:18] == (1, 2, 64, 64)
    assert args[18:22] == tuple(q.stride())
    ref = weakref.ref(q)
    del q
    gc.collect()
    assert ref() is None, "the direct launch keeps its first call's tensor alive"


def test_specialization_tells_apart_what_triton_compiles_apart() -> None:
    """Constexprs by value; ints by Triton's integer type, == 1 and divisibility by 16;
    tensors by dtype and 16-byte alignment; floats by class."""
    spec = direct.specialization
    flags = (False, False, True, False)
    base = [7, torch.zeros(8), 64, 0.5]
    assert spec(flags, base) == spec(flags, [9, torch.zeros(8), 64, 0.25])
    for other in ([1, torch.zeros(8), 64, 0.5], [16, torch.zeros(8), 64, 0.5],
                  [2**31, torch.zeros(8), 64, 0.5], [2**63, torch.zeros(8), 64, 0.5],
                  [7, torch.zeros(8).half(), 64, 0.5], [7, torch.zeros(8)[1:], 64, 0.5],
                  [7, torch.zeros(8), 128, 0.5], [7, torch.zeros(8), 64, 1]):
        assert spec(flags, other) != spec(flags, base), other
    assert spec(flags, [32, torch.zeros(8), 64, 0.5]) == spec(flags, [48, torch.zeros(8), 64,
                                                                       0.5])
    constexpr = (True,)  # True, 1 and 1.0 are one dict key but three kernels
    assert len({spec(constexpr, [c]) for c in (True, 1, 1.0)}) == 3


def test_per_call_tail_replaces_the_bound_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """A launch with its own tail passes that tail, hooks off, and caches no argument tuple."""
    log: list[int] = []
    dl, raw = _launch(monkeypatch, log)
    q, lse = torch.zeros(4), torch.zeros(2)
    dl((5, 1, 1), 99, (q, lse), [11, 0.25])
    dl((5, 1, 1), 99, (q, lse), [12, 0.75])
    assert [c[-2:] for c in raw.calls] == [(11, 0.25), (12, 0.75)]
    assert all(c[10:13] == (None, None, None) for c in raw.calls)
    assert dl._args == {}


def test_tensor_only_slots_pass_addresses_then_the_tail() -> None:
    """Without descriptor slots the arguments are the tensors' addresses, then the tail, both
    through the cached tuple and with a per-call tail."""
    raw = Recorder()
    compiled = SimpleNamespace(function=1234, packed_metadata=(4, 1, 0),
                               metadata=SimpleNamespace(tensordesc_meta=None),
                               launch_metadata=lambda *a: ("metadata", a))
    launcher = SimpleNamespace(launch_cooperative_grid=False, launch_pdl=False)
    dl = DirectLaunch(raw, compiled, launcher, (None, None), [3, 0.5])
    a, b = torch.zeros(4), torch.zeros(2)
    dl((2, 1, 1), 7, (a, b))
    dl((2, 1, 1), 7, (a, b), [4, 0.25])
    assert [c[13:] for c in raw.calls] == [(a.data_ptr(), b.data_ptr(), 3, 0.5),
                                           (a.data_ptr(), b.data_ptr(), 4, 0.25)]
