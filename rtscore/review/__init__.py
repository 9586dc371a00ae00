"""From a mapping campaign's detections to reviewed labels (docs/review.md): review export, the review page, ingest."""
