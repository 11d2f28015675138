"""The notebooks run top to bottom at their small budget (PUREJAXPPO_NOTEBOOK_BUDGET=small).

Each is executed by nbclient from a copy in a temporary folder, in a kernel that runs this
interpreter (a kernelspec written for the test, first on JUPYTER_PATH, so no other
installed `python3` kernel is picked up; the notebook's first cell checks it). The
committed notebook is only read, never written. Any cell error fails the test.
"""

import json
import sys
from pathlib import Path

import pytest

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
CHECK_KERNEL = "import sys; print(sys.executable); print(sys.prefix)"


@pytest.mark.slow
@pytest.mark.parametrize("name", ["quickstart.ipynb", "why_several_epochs.ipynb", "your_own_env_and_network.ipynb"])
def test_notebook_runs_at_small_budget(name, tmp_path, monkeypatch):
    import nbformat
    from nbclient import NotebookClient

    committed = NOTEBOOKS / name
    before = committed.read_bytes()
    copy = tmp_path / name
    copy.write_bytes(before)

    # a python3 kernelspec that runs this interpreter, found before any other
    spec_dir = tmp_path / "jupyter" / "kernels" / "python3"
    spec_dir.mkdir(parents=True)
    (spec_dir / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (test)", "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setenv("PUREJAXPPO_NOTEBOOK_BUDGET", "small")

    nb = nbformat.read(copy, as_version=4)
    nb.cells.insert(0, nbformat.v4.new_code_cell(CHECK_KERNEL))
    # the kernel's working folder is notebooks/, as when a user opens the notebook there
    client = NotebookClient(nb, kernel_name="python3", timeout=600, allow_errors=False,
                            resources={"metadata": {"path": str(NOTEBOOKS)}})
    client.execute()  # raises CellExecutionError on the first failing cell
    nbformat.write(nb, tmp_path / f"executed-{name}")

    executable, prefix = nb.cells[0].outputs[0]["text"].split()
    assert (executable, prefix) == (sys.executable, sys.prefix), "the kernel is not this test's interpreter"
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    assert all(cell.execution_count is not None for cell in code)
    assert not [o for cell in code for o in cell.outputs if o.output_type == "error"]
    assert "budget: small" in "".join(o.get("text", "") for o in code[1].outputs)
    assert committed.read_bytes() == before, "the committed notebook was modified"
