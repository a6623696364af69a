"""The report's "Models" table: each model its records measured, once per kind of files (a model whose rows
records.merge kept apart, at another revision, commit or files' hash, is a row per kind), with where it came from
(shipped, a hub id at its revision, a local config or folder), its weights, task and what says which files:
a local model's files' hash (``cell.model_hash``), a hub model's commit (``model_commit``)."""
from matrixbench.report.records import model_of
from matrixbench.report.tables import Table, label, missing
from runner.registry import shipped_spec

HEADER = ["Model", "Source", "Weights", "Task", "Files"]
COMMIT_CHARS = 12   # a commit cut as `git log --oneline` does; records and the CSV keep it whole


def models_table(cells):
    """One row per model name and kind of files among ``cells``' rows, in report row order."""
    seen = {}
    for row_key in cells.values("row"):
        for row in cells.rows:
            if row["row_key"] == row_key:
                seen.setdefault((row["cell.model"], model_of(row), row.get("cell.config_path")), row)
    return Table("Models", list(HEADER), [_row(row) for row in seen.values()])


def _row(row):
    found = dict(model_of(row))
    return [label(row["cell.model"]), label(source(row)), label(found["weights"]), label(found["task"]),
            _files(row, found)]


def source(row):
    """Where a model came from: "shipped (org/name)", "hub org/name@revision" (main: without one) or "local
    <config path as the runner saw it>"."""
    model_id, config_path = row.get("cell.model_id"), row.get("cell.config_path")
    if shipped_spec(row["cell.model"], model_id, config_path) is not None:
        return f"shipped ({model_id})" if model_id else "shipped"
    if config_path:
        return f"local {config_path}"
    revision = row.get("cell.revision")
    return f"hub {model_id}@{revision}" if revision else f"hub {model_id} (main)"


def _files(row, found):
    if found["model_hash"]:
        return label(found["model_hash"])
    if found["model_commit"]:
        return label(f"commit {found['model_commit'][:COMMIT_CHARS]}")
    if row.get("cell.config_path"):
        return missing("unknown")      # a local model's record from before the hash
    if shipped_spec(row["cell.model"], row.get("cell.model_id"), None) and found["weights"] == "random":
        return label("shipped config")
    return missing()
