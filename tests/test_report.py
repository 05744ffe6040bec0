"""The reproduce table (flashrepro_harness.report): which row shows what."""

from __future__ import annotations

import numpy as np

from flashrepro_harness.gate.simulate import results_from_rounds, synthetic_env
from flashrepro_harness.report import HEADERS, reproduce_rows

PUBLISHED = "article's ratio"


def test_published_ratio_only_on_rows_of_the_article_problem() -> None:
    """The article's published ratios were measured on its causal problem: the article-kernel
    rows of that problem (and its mma.sync re-run) show them, the non-causal twin does not."""
    rng = np.random.default_rng(0)
    names = ["article-kernel", "torch-flash", "article-kernel (non-causal)",
             "torch-flash (non-causal)", "article-kernel (mma.sync)", "torch-flash (mma.sync)"]
    results = results_from_rounds({n: list(rng.uniform(30, 60, 5)) for n in names},
                                  synthetic_env())
    assert results["problem"]["causal"] is True
    for rec in results["records"]:
        rec["causal"] = not rec["name"].endswith(" (non-causal)")
        rec["tflops"], rec["max_abs_err"] = 1.0, 1e-3
    results["published"] = {"ratio_first": 2.14, "ratio_tuned": 1.12}
    shown = {row[0]: row[HEADERS.index(PUBLISHED)] for row in reproduce_rows(results)}
    assert shown == {"article-kernel": "2.14 / 1.12", "torch-flash": "",
                     "article-kernel (non-causal)": "", "torch-flash (non-causal)": "",
                     "article-kernel (mma.sync)": "2.14 / 1.12", "torch-flash (mma.sync)": ""}


def test_sweep_caption_names_the_grid_it_ran() -> None:
    """The sweep's caption states the B·L it was given, not the default (a caption that always
    said 16384 mislabelled `bench --tokens 8192`)."""
    from flashrepro_harness.bench.sweep import caption

    environment = synthetic_env()
    for tokens in (8192, 16384, 65536):
        text = caption(environment, tokens)
        assert f"B·L={tokens} " in text
        assert environment["gpu"]["name"] in text and environment["torch"] in text
