"""Every path of a run directory, declared once (docs/architecture.md#run-layout).

A path is an :class:`Entry`: a template relative to the run directory, with ``{split}``, ``{seed}`` or
``{ratio}`` placeholders where it exists once per split, seed or prevalence ratio. Stages declare their
inputs and outputs as entries (``rtscore.stages.spec``) and read and write through them; nothing else in
the project spells a run-directory path.

::

    <run>/
      manifest.json                               every artifact: sha256, bytes, stage, stage hashes
      .verified/                                  hidden: one verification record per artifact (stat + sha256)
      config.resolved.yaml                        the config every stage used
      datasets/<split>.zarr                       tile stores
      datasets/context/<split>.zarr               0.5x context of val/test tiles (2x field of view, same ids)
      datasets/splits.yaml splits_summary.json    the split derived for a GeoTIFF root without splits.yaml
      datasets/set_aside/<time>/                  staged shards of another identity (rtscore.identity.set_aside)
      normalization_stats.json                    train split only
      validation/  report.json report.md samples.png
      seeds/summary.json                          multi-seed summary
      seeds/seed_<n>/  best_deployment.pth resume_latest.pth resume_epoch_NNNN.pth metrics.jsonl
                       run_summary.json run_summary.md curves.png attempts.json
                       set_aside/<time>/  checkpoints and weights of another identity, kept for the user
      calibration/  gates.json deployment_config.yaml summary.json report.md
      calibration/seed_<n>/  logit_cache.zarr deployment_config.yaml calibration_report.json
                             reliability.png pr_curves.png
                             deployment_config_1x.yaml (only when the shipped scales are not [1.0])
      evaluation/  test_report.json test_report.md pr_curves_1_<ratio>.png
      package/                                    the deployment package (rtscore.package)
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass

# File names inside a seed directory (the training loop writes them there).
BEST = "best_deployment.pth"  # EMA weights only (guide §4.3)
RESUME_LATEST = "resume_latest.pth"
RESUME_EPOCH = "resume_epoch_{epoch:04d}.pth"
RESUME_GLOB = "resume_*.pth"
METRICS = "metrics.jsonl"
RUN_SUMMARY = "run_summary.json"
ATTEMPTS = "attempts.json"
RUN_SUMMARY_MD = "run_summary.md"
CURVES = "curves.png"
# File names inside the validation directory (the data validation writes them there).
VALIDATION_REPORT_NAME = "report.json"
VALIDATION_REPORT_MD_NAME = "report.md"
SAMPLES = "samples.png"
# Hidden bookkeeping at the run root (a gs:// run: its local mirror): one verification record per
# artifact, so an unchanged input is hashed once per content (rtscore.storage.verified).
VERIFIED_DIR = ".verified"


@dataclass(frozen=True)
class Entry:
    """A run-directory path template; :meth:`at` fills its placeholders."""

    template: str

    @property
    def fields(self) -> tuple[str, ...]:
        """The placeholders of the template (``seed``, ``split``, ``ratio``), in order."""
        return tuple(f for _, f, _, _ in string.Formatter().parse(self.template) if f)

    def at(self, **values: object) -> str:
        """The relative path with every placeholder filled (a missing value is a bug: KeyError)."""
        return self.template.format(**values)

    def bind(self, **values: object) -> Entry:
        """This entry with some placeholders filled, e.g. ``DATASET.bind(split="train")`` (the others keep
        their format spec, e.g. ``{epoch:04d}``)."""
        out = []
        for literal, f, spec, _ in string.Formatter().parse(self.template):
            out.append(literal)
            if f in values:
                out.append(format(values[f], spec or ""))
            elif f:
                out.append("{" + f + (f":{spec}" if spec else "") + "}")
        return Entry("".join(out))

    def match(self, rel: str) -> dict[str, str] | None:
        """The placeholder values if ``rel`` is an instance of this entry, else None."""
        pattern = ""
        for literal, f, _, _ in string.Formatter().parse(self.template):
            pattern += re.escape(literal) + (f"(?P<{f}>[^/]+)" if f else "")
        m = re.fullmatch(pattern, rel)
        return m.groupdict() if m else None


class RunLayout:
    """The entries of a run directory. Use as ``RunLayout.BEST_WEIGHTS.at(seed=42)``."""

    MANIFEST = Entry("manifest.json")
    CONFIG = Entry("config.resolved.yaml")
    DATASET = Entry("datasets/{split}.zarr")
    # The 0.5x context of a split's tiles (guide §8.3): tile i is the 2x field of view around tile i of
    # DATASET, downsampled to the tile size, under the same tile id (val and test, when 0.5x is calibrated).
    CONTEXT_DATASET = Entry("datasets/context/{split}.zarr")
    # The region split derived for a GeoTIFF data root without splits.yaml, and its summary (rules, warnings):
    # written here, never into the data root (an input); the same for every split (derivation is seeded).
    DERIVED_SPLITS = Entry("datasets/splits.yaml")
    DERIVED_SPLITS_SUMMARY = Entry("datasets/splits_summary.json")
    NORMALIZATION_STATS = Entry("normalization_stats.json")

    VALIDATION = Entry("validation")
    VALIDATION_REPORT = Entry(f"validation/{VALIDATION_REPORT_NAME}")
    VALIDATION_REPORT_MD = Entry(f"validation/{VALIDATION_REPORT_MD_NAME}")
    VALIDATION_SAMPLES = Entry(f"validation/{SAMPLES}")

    SEEDS = Entry("seeds")
    SEEDS_SUMMARY = Entry("seeds/summary.json")
    SEED_DIR = Entry("seeds/seed_{seed}")
    BEST_WEIGHTS = Entry(f"seeds/seed_{{seed}}/{BEST}")
    RESUME_LATEST = Entry(f"seeds/seed_{{seed}}/{RESUME_LATEST}")
    # The rotating resume checkpoints: each is recorded in the run root as it is written (a gs:// run: in the
    # bucket), so a seed resumes on another worker after a pre-emption; pruned there as locally (keep_last_n).
    RESUME_EPOCH = Entry(f"seeds/seed_{{seed}}/{RESUME_EPOCH}")
    # Who trained the seed, attempt by attempt: the epochs each ran, from which recorded checkpoint it resumed.
    SEED_ATTEMPTS = Entry(f"seeds/seed_{{seed}}/{ATTEMPTS}")
    SEED_METRICS = Entry(f"seeds/seed_{{seed}}/{METRICS}")
    SEED_SUMMARY = Entry(f"seeds/seed_{{seed}}/{RUN_SUMMARY}")
    SEED_CURVES = Entry(f"seeds/seed_{{seed}}/{CURVES}")

    CALIBRATION = Entry("calibration")
    GATES = Entry("calibration/gates.json")
    DEPLOYMENT_CONFIG = Entry("calibration/deployment_config.yaml")
    CALIBRATION_SUMMARY = Entry("calibration/summary.json")
    CALIBRATION_REPORT_MD = Entry("calibration/report.md")
    SEED_CALIBRATION = Entry("calibration/seed_{seed}")
    LOGIT_CACHE = Entry("calibration/seed_{seed}/logit_cache.zarr")
    SEED_DEPLOYMENT_CONFIG = Entry("calibration/seed_{seed}/deployment_config.yaml")
    # The canonical 1x operating point (same TTA, scales [1.0]) of a seed whose shipped scales are not [1.0]:
    # what evaluate-test's canonical table runs at (guide §4.6, "evaluate_test is the 1x-only contract").
    SEED_DEPLOYMENT_CONFIG_1X = Entry("calibration/seed_{seed}/deployment_config_1x.yaml")
    SEED_CALIBRATION_REPORT = Entry("calibration/seed_{seed}/calibration_report.json")
    SEED_RELIABILITY = Entry("calibration/seed_{seed}/reliability.png")
    SEED_PR_CURVES = Entry("calibration/seed_{seed}/pr_curves.png")

    TEST_REPORT = Entry("evaluation/test_report.json")
    TEST_REPORT_MD = Entry("evaluation/test_report.md")
    TEST_OBJECTS = Entry("evaluation/test_objects.csv")  # one row per ground-truth object of the test tiles
    TEST_PR_CURVES = Entry("evaluation/pr_curves_1_{ratio}.png")

    PACKAGE = Entry("package")
    PACKAGE_SUMS = Entry("package/SHA256SUMS")


class SweepLayout:
    """The entries of a sweep directory (docs/experiments.md): its plan, the record of the run going on, the
    baseline's noise floor, the report, and a run directory per variant (laid out by :class:`RunLayout`). Use as
    ``SweepLayout.REPORT_JSON.at()``."""

    STAGE = "sweep"  # the manifest's stage of the sweep directory's own records

    MANIFEST = Entry("manifest.json")
    PLAN = Entry("plan.json")
    RUNNER = Entry("runner.json")  # the process running the sweep, its heartbeat (rtscore.sweep.liveness)
    NOISE_FLOOR = Entry("noise_floor.json")
    REPORT_JSON = Entry("report.json")
    REPORT_MD = Entry("report.md")
    REPORT_PNG = Entry("report.png")
    VARIANT = Entry("variants/{variant}")
