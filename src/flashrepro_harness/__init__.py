"""The flashrepro harness: the article's problem, timing, benchmarks, SASS and Nsight Compute
analysis, the regression gate and the reports, around the kernel library :mod:`flashrepro`.

Installed with the ``harness`` extra (``pip install flashrepro[harness]``); its commands run as
``flashrepro SUBCOMMAND`` or ``python -m flashrepro_harness SUBCOMMAND``. The library never
imports this package.
"""
