"""The example notebook runs top to bottom on a film folder, as CI runs it."""

from __future__ import annotations

import os
import subprocess

import nbformat
import pytest
from conftest import ARTIFACTS, ROOT
from nbclient import NotebookClient

from pipeline.inspection.explore import open_dataset

NOTEBOOK = ROOT / "examples" / "explore_dataset.ipynb"


def test_example_notebook_is_committed_without_outputs():
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(notebook)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert code and all(not cell.outputs and cell.execution_count is None for cell in code)
    ids = [cell.get("id") for cell in notebook.cells]  # nbformat warns of cells without one
    assert all(ids) and len(set(ids)) == len(ids)


@pytest.mark.slow
def test_the_readmes_notebook_command_runs_as_written(sintel_dataset, tmp_path):
    """The README's command, from the repository root, with a dataset path relative to it (the
    kernel itself runs in examples/)."""
    readme = (ROOT / "README.md").read_text()
    command = "ANIMEGAMER_DATASET=data .venv/bin/jupyter execute examples/explore_dataset.ipynb"
    assert command in readme
    relative = os.path.relpath(sintel_dataset, ROOT)
    env = {k: v for k, v in os.environ.items() if k != "PWD"}  # bash sets it, as a terminal does
    env["ANIMEGAMER_REPORT"] = str(tmp_path / "report.html")
    run = subprocess.run(
        ["bash", "-c", command.replace("=data ", f"={relative} ")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "Warning" not in run.stderr  # MissingIDFieldWarning among them
    assert (tmp_path / "report.html").stat().st_size > 0  # the last cell ran


@pytest.mark.slow
def test_example_notebook_runs_on_the_sample_films_output(sintel_dataset, tmp_path, monkeypatch):
    """The bundled sample film (the Sintel trailer) through `make dataset`, then the notebook."""
    film_dir = sintel_dataset
    monkeypatch.setenv("ANIMEGAMER_DATASET", str(film_dir))
    monkeypatch.setenv("ANIMEGAMER_REPORT", str(tmp_path / "report.html"))
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    # The kernel starts in the repository root, as it does when a user opens the notebook there.
    NotebookClient(
        notebook, timeout=180, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}
    ).execute()
    ARTIFACTS.mkdir(exist_ok=True)
    nbformat.write(notebook, ARTIFACTS / "explore_dataset.executed.ipynb")

    outputs = [
        output for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs
    ]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    dataset = open_dataset(film_dir)
    ok = dataset.usable[dataset.usable.status == "ok"]  # the example is a usable clip
    clip_id = ok.clip_id.iloc[len(ok) // 2]
    assert f"{len(ok)} of {len(dataset.manifest)} clips usable" in text
    results = [o.data["text/plain"] for o in outputs if o.output_type == "execute_result"]
    assert dataset.rejected_by_reason() and repr(dataset.rejected_by_reason()) in results
    assert f"{clip_id} {dataset.frames(clip_id).shape} uint8" in text
    previews = [
        o
        for o in outputs
        if o.output_type == "display_data"
        and f'alt="clip {clip_id}"' in o.data.get("text/html", "")
    ]
    assert len(previews) == 1  # ds.show() rendered the animated clip inline
    assert any("image/png" in o.get("data", {}) for o in outputs)  # the frame plot
    assert (tmp_path / "report.html").stat().st_size > 0
