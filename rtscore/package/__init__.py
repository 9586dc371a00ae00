"""The deployment package (guide §4.3): its format, building it, auditing and verifying it.

A package is a flat directory::

    package/
      weights.pth               EMA state_dict of the shipped seed (best_deployment.pth renamed)
      normalization_stats.json  channel-name bound mean/std (guide §4.5)
      deployment_config.yaml    calibrated threshold, temperature, tta, precision, ... (guide §4.6)
      model_config.yaml         architecture, backbone, channels, tile_size: what weights.pth fits
      run_metadata.json         git sha, MLflow run, seed, epoch, best metric, trained_with
      requirements_frozen.txt   name==version of every installed distribution
      SHA256SUMS                `sha256sum -c` lines for every other file

Everything but the weights is an inspectable text file, so :func:`verify_package` audits the whole package,
the pickle inside ``weights.pth`` included, without unpickling anything; only then does it load the weights
(``weights_only=True``) into the declared architecture and run one tile. Every use of a package (predict, map,
drift) goes through the same audit first (:func:`audited_package`, once per process while the files are unchanged).
"""

from rtscore.package.build import build_package, frozen_requirements, write_sha256sums
from rtscore.package.format import (
    DEPLOYMENT,
    METADATA,
    MODEL,
    PACKAGE_FILES,
    REQUIREMENTS,
    STATS,
    SUMS,
    WEIGHTS,
    Check,
    PackagedChannels,
    PackagedModelConfig,
    PackageError,
    PackageFile,
    PackageInfo,
    RunMetadata,
    TrainedWith,
    VerifyReport,
    package_holding,
    package_sha256,
    refuse_output_in_package,
    sums_text,
)
from rtscore.package.verify import (
    ALLOWED_GLOBALS,
    AuditedPackage,
    audit_package,
    audit_weights,
    audited_package,
    load_weights,
    pickle_globals,
    render_verify_report,
    verify_package,
    warn_if_fallback_threshold,
)

__all__ = [
    "ALLOWED_GLOBALS",
    "DEPLOYMENT",
    "METADATA",
    "MODEL",
    "PACKAGE_FILES",
    "REQUIREMENTS",
    "STATS",
    "SUMS",
    "WEIGHTS",
    "AuditedPackage",
    "Check",
    "PackageError",
    "PackageFile",
    "PackageInfo",
    "PackagedChannels",
    "PackagedModelConfig",
    "RunMetadata",
    "TrainedWith",
    "VerifyReport",
    "audit_package",
    "audit_weights",
    "audited_package",
    "build_package",
    "frozen_requirements",
    "load_weights",
    "package_holding",
    "package_sha256",
    "pickle_globals",
    "refuse_output_in_package",
    "render_verify_report",
    "sums_text",
    "verify_package",
    "warn_if_fallback_threshold",
    "write_sha256sums",
]
