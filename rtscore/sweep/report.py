"""``report.json`` of a sweep (:class:`SweepReport`): every variant's per-seed values of the deciding metric, mean ±
std, PR-AUC per prevalence ratio, its verdict against the baseline, the baseline's validation noise floor, and the
choice. ``report.md``, the PNG and the Prefect table are rendered from it (:mod:`rtscore.sweep.render`)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, JsonValue

from rtscore.sweep.verdict import Judgement


class Spread(BaseModel):
    """Mean ± std of one metric over a variant's seeds."""

    mean: float = Field(..., description="Mean over the seeds.")
    std: float | None = Field(..., description="Sample std over the seeds (null: one seed).")
    values: dict[int, float] = Field(..., description="The value per seed.")


class TestFigure(BaseModel):
    """One Test-Realistic metric over a tested variant's seeds (from its evaluation/test_report.json)."""

    __test__ = False  # not a pytest class

    mean: float = Field(..., description="Mean over seeds (nan: undefined for every seed).")
    std: float = Field(..., description="Sample std over seeds (nan for one seed).")
    text: str = Field(..., description="mean ± std as the test report writes it.")


class VariantReport(BaseModel):
    """One variant of the sweep."""

    name: str = Field(..., description="The variant's name (from the sweep file).")
    overrides: dict[str, JsonValue] = Field(..., description="Its dotted-key overrides of the base config.")
    baseline: bool = Field(..., description="Whether this is the baseline every other variant is judged against.")
    run_dir: str = Field(..., description="Its run directory (laid out as any run's).")
    seeds: list[int] = Field(..., description="The seeds it trained, in order.")
    metric: Spread | None = Field(..., description="The deciding metric per seed (null: no seed trained yet).")
    ratios: dict[str, Spread] = Field(
        default_factory=dict, description="Val-Realistic PR-AUC per prevalence ratio ('200', '500', ...)."
    )
    judgement: Judgement | None = Field(None, description="Against the baseline (null for the baseline itself).")
    shared: dict[str, str] = Field(
        default_factory=dict,
        description="Stage runs it took from another variant instead of computing them: '<stage>[ <param>]' -> "
        "the variant that computed them (the stage registry's identity was the same).",
    )


class NoiseFloor(BaseModel):
    """The baseline's validation noise floor (guide §10.1): PR-AUC at 1:``ratio`` over repeated validations of one
    checkpoint. The guide's std (``reweighted_std`` here) is ~0 by construction under this project's exact
    re-weighting; the margin comes from ``subsampled_std``, which is not (:func:`rtscore.sweep.run.margin_of`)."""

    seed: int = Field(..., description="The baseline seed whose best checkpoint was validated repeatedly.")
    repeats: int = Field(..., description="Validations of that checkpoint (the guide: 5).")
    ratio: int | None = Field(
        None,
        description="The prevalence 1:N the stds are at: metrics.ratios[0], the guide's 1:200 (null: a floor "
        "measured before issue 35, on the geomean; metric says).",
    )
    reweighted_std: float = Field(
        ..., description="Std with the exact re-weighting (the metric): the guide's definition, ~0 by construction."
    )
    subsampled_std: float = Field(
        ..., description="Std with a random negative subset per validation (the guide's method): the margin's basis."
    )
    bootstrap_std: float | None = Field(..., description="Tile-bootstrap std of the validation pool at 1:ratio.")
    metric: str = Field(..., description="What the stds are of.")


class SweepReport(BaseModel):
    """A sweep's outcome, running or finished."""

    schema_version: Literal[1] = 1
    name: str = Field(..., description="The sweep's name (its file's stem unless it names one).")
    sweep_dir: str = Field(..., description="Where its variants' run directories and this report live.")
    base_config: str = Field(..., description="The base pipeline config.")
    metric: str = Field(..., description="The deciding validation metric.")
    confidence: float = Field(..., description="Confidence of the paired intervals.")
    margin: float = Field(..., description="Smallest difference that counts (see the verdict rule).")
    margin_basis: str = Field("", description="Where the margin comes from, in one phrase (margin_of).")
    status: Literal["running", "finished"] = Field(..., description="Whether every variant × seed has trained.")
    variants: list[VariantReport] = Field(..., description="Baseline first, then the sweep file's order.")
    noise_floor: NoiseFloor | None = Field(None, description="The baseline's validation noise floor (§10.1).")
    chosen: str | None = Field(None, description="The variant chosen on the deciding metric (validation only).")
    choice: str = Field("", description="How the choice was made, in one sentence.")
    tested: list[str] = Field(
        default_factory=list, description="Variants evaluated on Test-Realistic, after the choice was recorded."
    )
    test: dict[str, dict[str, dict[str, TestFigure]]] = Field(
        default_factory=dict,
        description="Per tested variant, per prevalence ratio tag ('1_200'), per metric: its Test-Realistic figure.",
    )
    notes: list[str] = Field(default_factory=list, description="What the reader must know to read the figures.")

    def variant(self, name: str) -> VariantReport:
        return next(v for v in self.variants if v.name == name)
