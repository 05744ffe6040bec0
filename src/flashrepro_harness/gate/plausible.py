"""The fastest time a GPU could take for a record's problem: its matrix products at the GPU's
peak dense fp16 tensor-core rate, nothing else. A round median below that floor was measured by
a broken timer (an event pair around no work, a launch that never ran) or was not measured,
and :func:`check_floor` refuses the results (exit 4) before the gate compares anything.

The floor only catches the impossible: real kernels reach at most about three quarters of the
peak, so a results file whose times are too low by less than that passes here and is judged
as usual.
"""

from __future__ import annotations

from typing import Any

from flashrepro_harness.gate.numbers import is_number
from flashrepro_harness.gate.refusals import ResultsError
from flashrepro_harness.results import NON_CAUSAL, REFERENCE_PREFIX

DENSE_FLOPS_PER_CLOCK_PER_SM = {"8.0": 2048, "8.6": 1024, "8.7": 2048, "8.9": 1024,
                                "9.0": 4096, "10.0": 8192, "10.3": 8192, "12.0": 1024}
"""Dense fp16 tensor-core FLOPs per clock per SM, by compute capability (fp16 accumulation where
it is faster), from NVIDIA's peak figures: A100 312 TFLOP/s at 108 SMs and 1410 MHz; Jetson AGX Orin
(GA10B, an A100-class SM) about 42 TFLOP/s at 16 SMs and 1300 MHz; RTX 4090 330 TFLOP/s at 128
SMs and 2520 MHz; H100 SXM 989 TFLOP/s at 132 SMs and 1830 MHz; B200 about 2250 TFLOP/s at 148
SMs."""
UNKNOWN_FLOPS_PER_CLOCK_PER_SM = 16384
"""For a capability not in the table: twice the largest entry."""
CLOCK_CEILING_MHZ = 3500
"""The SM clock assumed where the results do not record the GPU's maximum, or record one below
:data:`MIN_CLOCK_MHZ` or above this (no GPU ships one this fast)."""
MIN_CLOCK_MHZ = 500
"""A recorded maximum SM clock below this is no GPU's (the lowest, a Jetson's, is about 600
MHz): the stand-in is used instead."""
MAX_SM_COUNT = 1024
"""More SMs than any GPU has (an H100 132, a B200 148): a count past it is refused."""
FAMILY_CAPABILITY = {"nvidia-a100": "8.0", "nvidia-a800": "8.0", "nvidia-h100": "9.0",
                     "nvidia-h800": "9.0", "nvidia-h20": "9.0", "nvidia-gh200": "9.0"}
"""The compute capability of GPUs by the start of their key (``nvidia-h20`` also starts the
H200's): a results file of such a GPU that states another is refused, as a lower one would
drop the Hopper-only rows the gate requires and a higher one lower the time floor."""
CEILING_FLOPS = 1e16
"""The rate assumed where the results do not record the SM count: 10 PFLOP/s dense fp16,
above any single GPU's."""


def peak_flops(gpu: dict[str, Any] | None) -> float:
    """Dense fp16 tensor FLOP/s that ``gpu`` (a results file's ``env.gpu``) cannot exceed: SM
    count x maximum SM clock x :data:`DENSE_FLOPS_PER_CLOCK_PER_SM`; a generous stand-in for
    each fact it lacks."""
    sms = (gpu or {}).get("sm_count")
    if not (isinstance(sms, int) and is_number(sms) and sms >= 1):
        return CEILING_FLOPS
    assert gpu is not None
    clock = gpu.get("max_sm_clock_mhz")
    if not (is_number(clock) and MIN_CLOCK_MHZ <= clock <= CLOCK_CEILING_MHZ):  # NaN too
        clock = CLOCK_CEILING_MHZ
    per_sm = DENSE_FLOPS_PER_CLOCK_PER_SM.get(str(gpu.get("capability")),
                                              UNKNOWN_FLOPS_PER_CLOCK_PER_SM)
    return sms * float(clock) * 1e6 * per_sm


def attended_pairs(seqlen_q: int, seqlen_k: int, causal: bool) -> int:
    """(query, key) pairs each batch and head computes at least: every pair, or under the
    causal mask the fewer of its two alignments' (top-left: key j <= query i; bottom-right:
    j <= i + L_k - L_q), so the floor holds whichever a kernel uses."""
    if not causal:
        return seqlen_q * seqlen_k

    def pairs(shift: int) -> int:  # sum over i < L_q of min(L_k, max(0, i + 1 + shift))
        lo = min(max(0, -shift), seqlen_q)  # rows before lo see no key
        full = min(max(lo, seqlen_k - 1 - shift), seqlen_q)  # rows from here see all L_k
        partial = (full - lo) * (lo + 1 + shift + full + shift) // 2
        return partial + (seqlen_q - full) * seqlen_k

    return min(pairs(0), pairs(seqlen_k - seqlen_q))


def floor_us(problem: dict[str, Any], causal: bool, gpu: dict[str, Any] | None) -> float:
    """The least time in µs ``problem`` (a results file's ``problem``, its causal flag
    replaced by ``causal``) takes on ``gpu``: Q·Kᵀ and P·V, 4·D FLOPs per attended pair, at
    :func:`peak_flops`."""
    pairs = attended_pairs(problem["seqlen_q"], problem["seqlen_k"], causal)
    flops = 4 * problem["batch"] * problem["heads"] * problem["head_dim"] * pairs
    return flops / peak_flops(gpu) * 1e6


def check_floor(data: dict[str, Any], label: str, facts: dict[str, Any] | None = None
                ) -> None:
    """Refuse a timed record of ``data`` (a results dict that follows
    :func:`~flashrepro_harness.gate.inputs.check_results`' rules, of the judge's own problem:
    another problem is refused as such, exit 6, not for its times) with a round median below
    :func:`floor_us` of its problem: ``(non-causal)`` records without the mask, the others
    with the problem's.

    The GPU's facts the floor rests on must be there: ``env.gpu.capability`` one of
    :data:`DENSE_FLOPS_PER_CLOCK_PER_SM` (and its family's, :data:`FAMILY_CAPABILITY`) and
    ``env.gpu.sm_count`` an int in [1, :data:`MAX_SM_COUNT`] (a results file that dropped or
    raised them would otherwise get a floor a fraction of the true one). ``facts``: the
    capability and SM count to use instead (a baseline's, which the judge trusts).

    Raises:
        ResultsError: a fact missing or unknown, or the first such record, with ``label``
            (the file) in the message.
    """
    problem, gpu = data["problem"], data["env"].get("gpu")
    if not gpu:
        raise ResultsError(f"{label}: 'env.gpu' is null: the run saw no GPU, and the gate "
                           "compares GPU timings")
    capability, sms = gpu.get("capability"), gpu.get("sm_count")
    family = next((c for k, c in FAMILY_CAPABILITY.items()
                   if str(gpu.get("key", "")).startswith(k)), None)
    if family is not None and capability != family:
        raise ResultsError(f"{label}: 'env.gpu.capability' is {capability!r}, but a "
                           f"{gpu.get('name')!r} is {family} (gate.plausible."
                           "FAMILY_CAPABILITY)")
    if not isinstance(capability, str) or capability not in DENSE_FLOPS_PER_CLOCK_PER_SM:
        raise ResultsError(f"{label}: 'env.gpu.capability' is {capability!r}, not one the "
                           f"gate knows the peak rate of ({sorted(DENSE_FLOPS_PER_CLOCK_PER_SM)}"
                           "; a new GPU's goes in gate.plausible.DENSE_FLOPS_PER_CLOCK_PER_SM): "
                           "the time floor needs it")
    if not (isinstance(sms, int) and is_number(sms) and 1 <= sms <= MAX_SM_COUNT):
        raise ResultsError(f"{label}: 'env.gpu.sm_count' is {sms!r}, not an int in [1, "
                           f"{MAX_SM_COUNT}]: the time floor needs it")
    if facts:
        gpu = {**gpu, "capability": facts.get("capability"), "sm_count": facts.get("sm_count")}
    floors = {causal: floor_us(problem, causal, gpu) for causal in (False, True)}
    for rec in data["records"]:
        rounds = rec.get("round_medians_us")
        if not rounds:
            continue
        name = rec["name"].removeprefix(REFERENCE_PREFIX)
        floor = floors[problem["causal"] and NON_CAUSAL not in name]
        fastest = min(rounds)
        if fastest < floor:
            raise ResultsError(
                f"{label}: record {rec['name']!r} has a round median of {fastest:.4g} µs, "
                f"below {floor:.4g} µs, the time its matrix products take at the GPU's peak "
                f"dense fp16 rate ({peak_flops(gpu) / 1e12:.0f} TFLOP/s: "
                "gate.plausible.peak_flops): a timer that measured no work")
