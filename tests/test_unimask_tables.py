"""reproductions/unimask/table_heatmaps.py: a grid's appendix-comparison table read back into its
means and standard errors (the heatmaps of a grid whose work directories are gone)."""

import json
import subprocess
import sys

import numpy as np
import pytest

from icrl_jax.core.errors import UserError
from icrl_jax.papers.unimask import appendix

from helpers import ROOT, load_script

def _module():
    return load_script("reproductions/unimask/table_heatmaps.py", "unimask_table_heatmaps")


def test_a_written_table_reads_back_to_three_figures_and_rows_not_run_are_nan(tmp_path):
    rng = np.random.default_rng(0)
    mean = {"random": rng.uniform(0.5, 8, 8).tolist(), "behaviour_cloning": rng.uniform(1, 8, 8)}
    mean[appendix.FINETUNED] = np.r_[rng.uniform(0.5, 2, 7), np.nan].tolist()  # one column not tuned
    mean = {r: list(v) for r, v in mean.items()}
    sem = {r: (0.01 * np.abs(np.asarray(v))).tolist() for r, v in mean.items()}
    path = tmp_path / "page.md"
    path.write_text("# a page\n\nsome text\n\n" + appendix.appendix_comparison(mean, sem, 500, 3)
                    + "\nmore text\n")
    table = _module().read_table(str(path), 500)
    assert table["seeds"] == 3
    assert list(table["rows"]) == list(appendix.APPENDIX_RAW[500])  # every appendix row, in order
    for row, values in mean.items():
        got_mean, got_sem = table["rows"][row]
        np.testing.assert_allclose(got_mean, values, rtol=5e-3)
        np.testing.assert_allclose(got_sem, sem[row], rtol=5e-2)
    assert np.isnan(table["rows"]["all"][0]).all()  # a row not run
    with pytest.raises(UserError, match="no table captioned 'Uni\\[MASK\\] DoorKey, 50 traj"):
        _module().read_table(str(path), 50)


def test_the_heatmaps_are_drawn_from_the_table(tmp_path):
    mean = {r: list(v) for r, v in appendix.APPENDIX_RAW[500].items()}
    sem = {r: [0.01] * 8 for r in mean}
    page = tmp_path / "page.md"
    page.write_text(appendix.appendix_comparison(mean, sem, 500, 3))
    _module().main(str(page), "500", str(tmp_path / "out"))
    for name in ("heatmap_raw.png", "heatmap_best.png", "heatmap.json"):
        assert (tmp_path / "out" / name).stat().st_size > 0
    best = json.loads((tmp_path / "out" / "heatmap.json").read_text())["normalised_best"]
    assert best["random+finetune"][6] == pytest.approx(1.0)  # forward dynamics' best row
    assert best["random"][6] == pytest.approx(0.164 / 0.000304, rel=1e-3)


def test_the_script_refuses_a_missing_page_in_one_line(tmp_path):
    out = subprocess.run([sys.executable, "reproductions/unimask/table_heatmaps.py",
                          str(tmp_path / "absent.md"), "500", str(tmp_path / "out")],
                         cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "absent.md" in lines[0], out.stderr
    assert not (tmp_path / "out").exists()
