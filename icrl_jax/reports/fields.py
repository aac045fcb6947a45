"""Config fields of the report kinds beside the core's `report` section (pure ml_collections:
experiment files import this)."""

from __future__ import annotations


def columns_report_fields() -> dict:
    """The `report` fields of `kind="columns"` (`reports/columns.py`): one table of config
    variants (the config's `columns`) x seeds."""
    return dict(
        kind="columns",
        metrics=(),  # read as `model@<highest target>_<metric>` from each seed's eval.json
        run_metrics=(),  # eval.json keys without the target (e.g. a method's analysis readouts)
        # columns skipped while a "{field}" they name (a `report` field) is empty, e.g. a model
        # whose weights were not given
        optional_columns=(),
    )
