"""The forward kernels (Triton and Gluon) and what their launches share."""

LOG2_E = 1.4426950408889634
"""log2(e): the kernels take sm_scale·log2(e) and exponentiate with exp2."""
