"""The documentation's figures, drawn from the project's committed results.

Every number comes from where it is already written down: the markdown tables of
`experiments/RESULTS.md`, `experiments/dpt/RESULTS.md` and `benchmarks/RESULTS.md`, the
Uni[MASK] appendix-comparison table on `docs/papers/unimask.md`, and the curve data of one real
run in `docs/figures/data/`. The pictures of the environments are drawn from the envs' own params
and states, stepped with their own `step`.

    python docs/figures/make_figures.py                      # every figure, into docs/img/
    python docs/figures/make_figures.py --only curves,msat   # some of them
    python docs/figures/make_figures.py --root DIR --out OUT # read DIR's files, write OUT/*.png

A missing file, section or row is one line naming it, exit 2.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from dataclasses import dataclass

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

EXPERIMENTS = "experiments/RESULTS.md"
BENCHMARKS = "benchmarks/RESULTS.md"
UNIMASK_PAGE = "docs/papers/unimask.md"
GPT_DTMA_PAGE = "docs/papers/gpt-dtma.md"
CURVES = "docs/figures/data/ad_darkroom_quick.json"
DPT = "experiments/dpt/RESULTS.md"

#: One palette for every figure: ours, the paper, and the other policies or methods.
OURS, PAPER, SOURCE, RANDOM = "#3f51b5", "#9e9e9e", "#ef6c00", "#757575"
METHOD_COLOURS = ("#3f51b5", "#ef6c00", "#2e7d32", "#ad1457", "#00838f")
DPI = 110
#: The paper's value beside a bar of ours.
PAPER_MARKER = dict(marker="D", s=42, facecolor="white", edgecolor="black", linewidth=1.5, zorder=4)


class FigureInputError(ValueError):
    """A results file, table or row the figures need is missing or unreadable."""


# ---- reading the results files ------------------------------------------------------------------

@dataclass
class Table:
    """A markdown table: the `## ` or `### ` heading above it, its header and its rows."""

    section: str
    header: list[str]
    rows: list[list[str]]


def split_row(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def read_tables(path: str) -> list[Table]:
    """Every markdown table in `path`, with the heading it sits under."""
    if not os.path.isfile(path):
        raise FigureInputError(f"{path}: no such file")
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    tables, section, i = [], "", 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("#"):
            section = line.lstrip("#").strip()
        is_table = (line.startswith("|") and i + 1 < len(lines)
                    and re.fullmatch(r"\|?[\s:|-]+\|?", lines[i + 1].strip() or "x"))
        if is_table:
            header, rows, i = split_row(line), [], i + 2
            while i < len(lines) and lines[i].startswith("|"):
                rows.append(split_row(lines[i]))
                i += 1
            tables.append(Table(section, header, rows))
            continue
        i += 1
    return tables


def plain(text: str) -> str:
    """A cell without markdown emphasis or code marks."""
    return text.replace("**", "").replace("`", "").strip()


def find_table(path: str, section: str, first_column: str | None = None) -> Table:
    """The first table under the heading that starts with `section` (and whose first header
    cell is `first_column`, when given)."""
    for table in read_tables(path):
        if table.section.startswith(section) and (first_column is None
                                                   or plain(table.header[0]) == first_column):
            return table
    raise FigureInputError(f"{path}: no table under a heading '{section}'"
                           + (f" with first column '{first_column}'" if first_column else ""))


def table_rows(path: str, section: str, first_column: str) -> list[dict[str, str]]:
    """The rows of `find_table(path, section, first_column)` as {header: cell}."""
    table = find_table(path, section, first_column)
    header = [plain(h) for h in table.header]
    return [dict(zip(header, row)) for row in table.rows]


def find_row(path: str, table: Table, pattern: str) -> dict[str, str]:
    """The row whose first cell (emphasis removed) matches the regex `pattern` at its start,
    as {header: cell}."""
    for row in table.rows:
        if re.match(pattern, plain(row[0])):
            return dict(zip([plain(h) for h in table.header], row))
    raise FigureInputError(f"{path}: section '{table.section}' has no row matching '{pattern}'")


NUMBER = r"-?\d[\d,]*(?:\.\d+)?(?:e-?\d+)?"


def number(text: str) -> float:
    return float(text.replace(",", ""))


def numbers(text: str) -> list[float]:
    """Every number in `text`, in order ("1,234" is one number)."""
    return [number(m) for m in re.findall(NUMBER, plain(text))]


def mean_sem(text: str) -> tuple[float, float]:
    """The first "mean ± s.e.m." in `text`; a lone number has s.e.m. NaN."""
    text = plain(text)
    match = re.search(rf"({NUMBER})(?:\s*±\s*({NUMBER}))?", text)
    if match is None:
        raise FigureInputError(f"no number in '{text}'")
    return number(match.group(1)), (number(match.group(2)) if match.group(2) else float("nan"))


def named_values(text: str, names: list[str]) -> dict[str, tuple[float, float]]:
    """{name: (mean, s.e.m.)} for each of `names` written as "NAME mean ± sem" in `text`; a name
    inside a longer one ("DT" in "GPT-DT", "GPT-DT" in "GPT-DTMA") does not count. Names that are
    absent are left out."""
    text, found = plain(text), {}
    for name in names:
        match = re.search(rf"(?<![\w-]){re.escape(name)} ({NUMBER})(?:\s*±\s*({NUMBER}))?", text)
        if match:
            found[name] = (number(match.group(1)),
                           number(match.group(2)) if match.group(2) else float("nan"))
    return found


def seed_values(text: str) -> list[float]:
    """The per-seed values in the first parenthesis of `text` that holds only numbers, "(a / b / c)"
    or "(a, b, c)"; [] when there is none."""
    for group in re.findall(r"\(([^()]*)\)", plain(text)):
        parts = re.split(r"\s*[/,]\s*", group.strip())
        if len(parts) > 1 and all(re.fullmatch(NUMBER, p) for p in parts):
            return [number(p) for p in parts]
    return []


# ---- drawing helpers ----------------------------------------------------------------------------

def pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    plt.rcParams.update({"font.size": 10, "axes.spines.top": False, "axes.spines.right": False,
                         "axes.titlesize": 11, "figure.dpi": DPI})
    return plt


def save(fig, out: str, name: str) -> str:
    path = os.path.join(out, name)
    fig.savefig(path, dpi=DPI, bbox_inches="tight", facecolor="white")
    import matplotlib.pyplot as plt
    plt.close(fig)
    return path


def bars(ax, groups: list[str], series: dict[str, tuple[list[float], list[float]]],
         colours=METHOD_COLOURS, width: float = 0.8):
    """Grouped bars: `series` {label: (means, sems)} over `groups`; NaN s.e.m. draws no error bar."""
    step = width / len(series)
    x = np.arange(len(groups))
    for k, (label, (means, sems)) in enumerate(series.items()):
        sems = np.asarray(sems, float)
        ax.bar(x - width / 2 + (k + 0.5) * step, means, step * 0.92, label=label,
               color=colours[k % len(colours)],
               yerr=None if np.isnan(sems).all() else np.where(np.isnan(sems), 0, sems),
               capsize=3, error_kw=dict(lw=1))
    ax.set_xticks(x, groups)
    return x, step


def text_colour(rgba) -> str:
    """Black on light cells, white on dark ones (relative luminance)."""
    r, g, b = rgba[:3]
    return "black" if 0.2126 * r + 0.7152 * g + 0.0722 * b > 0.5 else "white"


# ---- the main job's in-context curves -----------------------------------------------------------

def figure_curves(root: str, out: str) -> list[str]:
    """Return per in-context episode of the main job's model, its source and random, on held-out
    goals (one real run's `eval.json`, kept in docs/figures/data/)."""
    path = os.path.join(root, CURVES)
    if not os.path.isfile(path):
        raise FigureInputError(f"{path}: no such file")
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.2, 3.8))
    styles = {"model": ("AD (ours, trained)", OURS, "-"), "source": ("source: grid explorer", SOURCE, "--"),
              "random": ("random policy", RANDOM, ":")}
    for policy, (label, colour, style) in styles.items():
        if policy not in data["curves"]:
            continue
        mean = np.asarray(data["curves"][policy]["mean"], float)
        sem = np.asarray(data["curves"][policy]["sem"], float)
        episodes = np.arange(1, len(mean) + 1)
        ax.plot(episodes, mean, style, color=colour, lw=2, label=label)
        ax.fill_between(episodes, mean - sem, mean + sem, color=colour, alpha=0.15, lw=0)
    ax.set_xlabel("in-context episode (the model's weights are fixed)")
    ax.set_ylabel("episode return")
    ax.set_title(data.get("title", "in-context learning on held-out goals"))
    ax.legend(frameon=False, loc="center right")
    ax.set_ylim(bottom=0)
    return [save(fig, out, "ad_darkroom_curves.png")]


# ---- one figure per paper page ------------------------------------------------------------------

def figure_headless_ad(root: str, out: str) -> list[str]:
    """Table 1: ours and the paper's score on unseen arm counts, and the ablations (3 seeds)."""
    path = os.path.join(root, EXPERIMENTS)
    table = find_table(path, "Headless-AD")
    main = find_row(path, table, r"Table 1: Bernoulli")
    ablations = find_row(path, table, r"Table 1 ablations")
    arms = [int(a) for a in re.search(r"(\d+(?: / \d+)+) arms", plain(main["experiment"])).group(1).split(" / ")]
    paper = numbers(main["paper"])[:len(arms)]
    ours = numbers(main["ours"].split("(")[0])[:len(arms)]
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.9), gridspec_kw=dict(width_ratios=[1, 1.5]))
    bars(left, [str(a) for a in arms], {"paper": (paper, [np.nan] * len(arms)),
                                        "ours (one seed)": (ours, [np.nan] * len(arms))},
         colours=(PAPER, OURS))
    left.set_title("Table 1: unseen arm counts")
    series = {}
    for segment in plain(ablations["ours"]).split(";"):
        name, values = re.match(r"\s*(.*?)\s+(-?\d.*)$", segment).groups()
        parsed = [mean_sem(v) for v in values.split("(")[0].split(" / ")]
        series[name] = ([m for m, _ in parsed], [s for _, s in parsed])
    abl_arms = re.search(r"(\d+(?: / \d+)+) arms", plain(ablations["experiment"])).group(1).split(" / ")
    bars(right, abl_arms, series)
    right.axhline(0, color="black", lw=0.8)
    right.set_title("ablations, 3,000 updates (mean ± s.e.m., 3 seeds)")
    for ax in (left, right):
        ax.set_xlabel("number of arms (trained on 4-20)")
        ax.legend(frameon=False, fontsize=8, loc="upper left")
    left.set_ylabel("score (random 0, Thompson sampling 1)")
    left.set_ylim(0, 1.25)
    right.set_ylim(-0.15, 1.1)
    return [save(fig, out, "headless_ad_table1.png")]


#: Key-to-Door rows drawn (first-cell pattern, label).
KEY_TO_DOOR_ROWS = ((r"the paper's Q-learning histories", "Q-learning data"),
                    (r"stronger dropout", "+ dropout"),
                    (r"each episode's first step marked", "+ dropout,\nepisode starts"))


def figure_ngram(root: str, out: str) -> list[str]:
    """Key-to-Door on held-out goals: AD + n-gram beside AD, mean ± s.e.m. and each seed."""
    path = os.path.join(root, EXPERIMENTS)
    table = find_table(path, "N-gram induction heads", "data and change")
    columns = ("AD + n-gram", "AD")
    means = {c: [] for c in columns}
    sems = {c: [] for c in columns}
    seeds = {c: [] for c in columns}
    for pattern, _ in KEY_TO_DOOR_ROWS:
        row = find_row(path, table, pattern)
        for c in columns:
            m, s = mean_sem(row[c])
            means[c].append(m)
            sems[c].append(s)
            seeds[c].append(seed_values(row[c]))
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.2, 4))
    x, step = bars(ax, [label for _, label in KEY_TO_DOOR_ROWS],
                   {c: (means[c], sems[c]) for c in columns})
    for k, c in enumerate(columns):
        for i, values in enumerate(seeds[c]):
            ax.scatter([x[i] - 0.4 + (k + 0.5) * step] * len(values), values, s=12, color="black",
                       zorder=3, label="seeds" if (k, i) == (0, 0) else None)
    for level, style, label in ((2.0, "--", "optimal:\nkey and door"), (1.0, ":", "key alone")):
        ax.axhline(level, color="black", lw=0.8, ls=style)
        ax.text(1.01, level, label, fontsize=8, va="center", transform=ax.get_yaxis_transform())
    ax.set_ylim(0, 2.4)
    ax.set_ylabel("last-episode return, held-out goals")
    ax.set_title("Dark Key-to-Door, 2x64 models, 30,000 updates")
    ax.legend(frameon=False, fontsize=8, loc="upper left", ncols=3)
    return [save(fig, out, "ngram_key_to_door.png")]


#: The bandit policies of DPT's online-regret claim, as its results table names them.
DPT_BANDIT_POLICIES = ("DPT", "TS", "UCB", "empirical mean", "source", "random")
#: "mean ± sem (episode N)" or "mean ± sem (N)": one point of a return-per-episode curve.
EPISODE_POINT = rf"({NUMBER}) ± ({NUMBER}) \((?:episode )?(\d+)\)"


def episode_points(text: str) -> tuple[list[int], list[float], list[float]]:
    """(episodes, means, sems) of every "mean ± sem (episode N)" in `text`, in order."""
    found = re.findall(EPISODE_POINT, plain(text))
    if not found:
        raise FigureInputError(f"no 'mean ± s.e.m. (episode N)' points in '{plain(text)[:60]}...'")
    return ([int(e) for _, _, e in found], [number(m) for m, _, _ in found],
            [number(s) for _, s, _ in found])


def figure_dpt(root: str, out: str) -> list[str]:
    """DPT's claims at quick scale: cumulative bandit regret by policy, and the return per
    in-context episode on held-out Dark Room goals of DPT, AD and the data's source."""
    path = os.path.join(root, DPT)
    table = find_table(path, "", "claim")
    bandit = plain(find_row(path, table, r"bandits online")["ours"])
    regret = named_values(bandit, list(DPT_BANDIT_POLICIES))
    if "DPT" not in regret:
        raise FigureInputError(f"{path}: the bandits-online row names no 'DPT mean ± s.e.m.'")
    room = plain(find_row(path, table, r"Dark Room, held-out goals")["ours"])
    dpt_curve = episode_points(room.split(";")[0])
    source_text = room.split("source", 1)[-1]
    source = numbers(source_text.split(")", 1)[-1])[:len(dpt_curve[0])]
    versus = plain(find_row(path, table, r"DPT against AD")["ours"])
    ad_curve = episode_points(versus.split("Dark Room AD", 1)[-1].split(":")[0])

    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(10.5, 3.8), width_ratios=(1, 1.25))
    names = list(regret)
    left.bar(names, [regret[n][0] for n in names],
             color=[OURS if n == "DPT" else SOURCE if n == "source" else
                    RANDOM if n == "random" else PAPER for n in names])
    with_sem = [k for k, n in enumerate(names) if not np.isnan(regret[n][1])]
    left.errorbar(with_sem, [regret[names[k]][0] for k in with_sem],
                  yerr=[regret[names[k]][1] for k in with_sem], fmt="none", ecolor="black", capsize=3)
    left.set_ylabel("cumulative regret after 100 pulls")
    left.set_title("Bandits, online (5 arms)")
    left.set_xticks(range(len(names)), names, rotation=30, ha="right")
    for label, (episodes, means, sems), colour, style in (
            ("DPT", dpt_curve, OURS, "-o"), ("AD", ad_curve, METHOD_COLOURS[2], "-s")):
        means, sems = np.asarray(means), np.asarray(sems)
        right.plot(episodes, means, style, color=colour, lw=2, ms=4, label=label)
        right.fill_between(episodes, means - sems, means + sems, color=colour, alpha=0.15, lw=0)
    if len(source) == len(dpt_curve[0]):
        right.plot(dpt_curve[0], source, "--", color=SOURCE, lw=2, label="the data's source")
    right.set_xlabel("in-context episode")
    right.set_ylabel("episode return")
    right.set_title("Dark Room, held-out goals, online")
    right.set_ylim(bottom=0)
    right.legend(frameon=False, fontsize=8, loc="upper left")
    fig.suptitle("DPT at quick scale, 3 training seeds (mean ± s.e.m.)", fontsize=11)
    return [save(fig, out, "dpt_claims.png")]


def read_unimask(path: str, size: int = 500):
    """(tasks, rows, appendix, ours, untrained) of the appendix-comparison table captioned with
    `size` trajectories on the Uni[MASK] page; cells "appendix / ours ± sem / ratio [*u*]"."""
    if not os.path.isfile(path):
        raise FigureInputError(f"{path}: no such file")
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    caption = f"Uni[MASK] DoorKey, {size} trajectories"
    start = next((i for i, line in enumerate(lines) if line.startswith(caption)), None)
    if start is None:
        raise FigureInputError(f"{path}: no table captioned '{caption}'")
    header = next(i for i in range(start, len(lines)) if lines[i].startswith("|"))
    tasks = split_row(lines[header])[1:]
    rows, appendix, ours, untrained = [], [], [], []
    for line in lines[header + 2:]:
        if not line.startswith("|"):
            break
        name, *cells = split_row(line)
        rows.append(name)
        parsed = [re.match(rf"({NUMBER}) / ({NUMBER}) ± ({NUMBER}) / ", c) for c in cells]
        appendix.append([number(m.group(1)) if m else np.nan for m in parsed])
        ours.append([number(m.group(2)) if m else np.nan for m in parsed])
        untrained.append(["*u*" in c for c in cells])
    return tasks, rows, np.array(appendix), np.array(ours), np.array(untrained)


def heatmap(ax, values, tasks, rows, norm, cmap, fmt, untrained):
    """Cells coloured by `values`; untrained heads' cells grey, their value in grey italics."""
    image = ax.imshow(np.where(untrained, np.nan, values), cmap=cmap, norm=norm, aspect="auto")
    ax.imshow(np.where(untrained, 1.0, np.nan), cmap="Greys", vmin=0, vmax=8, aspect="auto")
    for i in range(values.shape[0]):
        for j in range(values.shape[1]):
            if np.isnan(values[i, j]):
                continue
            if untrained[i, j]:
                ax.text(j, i, fmt(values[i, j]), ha="center", va="center", fontsize=8, color="#757575",
                        style="italic")
                continue
            rgba = image.cmap(image.norm(values[i, j]))
            ax.text(j, i, fmt(values[i, j]), ha="center", va="center", fontsize=8, color=text_colour(rgba))
    ax.set_xticks(range(len(tasks)), [t.replace(" ", "\n", 1) for t in tasks], fontsize=8)
    ax.set_yticks(range(len(rows)), [r.replace("_", " ") for r in rows], fontsize=8)
    ax.set_xlabel("evaluated on")
    ax.set_ylabel("trained with")
    ax.tick_params(length=0)
    for side in ("top", "right", "left", "bottom"):
        ax.spines[side].set_visible(False)
    return image


def log_colour_bar(fig, ax, image, ticks, extend, label):
    from matplotlib.ticker import NullFormatter
    bar = fig.colorbar(image, ax=ax, extend=extend, fraction=0.04, pad=0.02, ticks=ticks)
    bar.ax.yaxis.set_minor_formatter(NullFormatter())
    bar.ax.set_yticklabels([f"{t:g}" for t in ticks])
    bar.set_label(label)


def figure_unimask(root: str, out: str) -> list[str]:
    """The 500-trajectory grid at the authors' settings: each column over its best row (the
    paper's form) and ours over the appendix's value, with colour bars."""
    from matplotlib.colors import LogNorm
    tasks, rows, appendix, ours, untrained = read_unimask(os.path.join(root, UNIMASK_PAGE))
    plt = pyplot()
    written = []
    best = ours / np.nanmin(np.where(untrained, np.nan, ours), axis=0)
    fig, ax = plt.subplots(figsize=(9.5, 5.6))
    image = heatmap(ax, best, tasks, rows, LogNorm(1.0, 100.0), "YlOrRd",
                    lambda v: f"{v:.2f}" if v < 10 else f"{v:.0f}", untrained)
    log_colour_bar(fig, ax, image, [1, 1.5, 2, 5, 10, 100], "max",
                   "validation loss / the column's best (log scale; lower is better)")
    ax.set_title("Uni[MASK] DoorKey, 500 trajectories, 3 seeds: each column over its best row\n"
                 "(grey: an untrained state head, left out of the column's best)", fontsize=10)
    written.append(save(fig, out, "unimask_best.png"))

    ratio = ours / appendix
    fig, ax = plt.subplots(figsize=(9.5, 5.6))
    image = heatmap(ax, ratio, tasks, rows, LogNorm(0.5, 2.0), "RdBu_r",
                    lambda v: f"{v:.2f}" if v < 10 else f"{v:.0f}", untrained)
    log_colour_bar(fig, ax, image, [0.5, 0.75, 0.87, 1, 1.15, 1.33, 2], "both",
                   "ours / the appendix's value (log scale; white: equal)")
    ax.set_title("Uni[MASK] DoorKey, 500 trajectories: our validation loss over the paper's appendix\n"
                 "(grey: an untrained state head)", fontsize=10)
    written.append(save(fig, out, "unimask_vs_appendix.png"))
    return written


GPT_DTMA_COLUMNS = ["DT", "GPT-DT", "GPT-DTMA"]
#: Table 3 rows drawn (first-cell pattern, label) and Table 4's mazes.
TABLE3_ROWS = ((r"Table 3, hopper medium\b(?!-)", "hopper\nmedium"),
               (r"Table 3, hopper medium-replay", "hopper\nmed.-replay"),
               (r"Table 3, hopper medium-expert", "hopper\nmed.-expert"),
               (r"Table 3, brax walker2d medium", "walker2d\nmedium"),
               (r"Table 3, brax halfcheetah medium", "halfcheetah\nmedium"))
TABLE4_ROWS = ((r"Table 4, point maze U \(", "U maze"), (r"Table 4, point maze medium \(", "medium maze"),
               (r"Table 4, point maze large \(", "large maze"))


def figure_gpt_dtma(root: str, out: str) -> list[str]:
    """Tables 3 and 4 at quick scale: DT, GPT-DT and GPT-DTMA (mean ± s.e.m., 3 seeds), the
    paper's mazes beside ours."""
    path = os.path.join(root, EXPERIMENTS)
    table = find_table(path, "GPT-DTMA")
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.2), gridspec_kw=dict(width_ratios=[1.6, 1]))
    for ax, spec in ((left, TABLE3_ROWS), (right, TABLE4_ROWS)):
        found = [named_values(find_row(path, table, pattern)["ours"], GPT_DTMA_COLUMNS) for pattern, _ in spec]
        series = {c: ([f[c][0] for f in found], [f[c][1] for f in found]) for c in GPT_DTMA_COLUMNS}
        x, step = bars(ax, [label for _, label in spec], series)
        if ax is right:
            for i, (pattern, _) in enumerate(spec):
                paper = named_values(find_row(path, table, pattern)["paper"], GPT_DTMA_COLUMNS)
                for k, c in enumerate(GPT_DTMA_COLUMNS):
                    if c in paper:
                        ax.scatter(x[i] - 0.4 + (k + 0.5) * step, paper[c][0], **PAPER_MARKER,
                                   label="the paper" if (i, k) == (1, 0) else None)
    left.set_ylabel("normalised score (our PPO: random 0, expert 100)")
    left.set_title("Table 3's analogue, brax locomotion, quick LM")
    right.set_ylabel("steps to the goal (lower is better)")
    right.set_title("Table 4's analogue, point mazes")
    left.legend(frameon=False, fontsize=8, loc="upper left")
    right.legend(frameon=False, fontsize=8, loc="upper left")
    return [save(fig, out, "gpt_dtma_tables.png")]


def figure_markov_heads(root: str, out: str) -> list[str]:
    """Markov-head statistics per model (the GPT-DTMA page's table): R.2 over the heads as a box
    (min, quartiles, max) against Definition 1's r = 20, and the fraction of each head's W_q W_k^T
    diagonal that is positive (min, median, max)."""
    path = os.path.join(root, GPT_DTMA_PAGE)
    rows = table_rows(path, "SmolLM2-135M's Markov heads", "model")
    r2_column = next(h for h in rows[0] if h.startswith("R.2"))
    diagonal_column = next(h for h in rows[0] if h.startswith("positive diagonal"))
    labels = [plain(r["model"]) for r in rows]
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 0.42 * len(rows) + 1.6), sharey=True,
                                      gridspec_kw=dict(width_ratios=[1.4, 1]))
    y = np.arange(len(rows))[::-1]
    stats = []
    for row, yi in zip(rows, y):
        low, q1, median, q3, high = numbers(row[r2_column])[:5]
        stats.append(dict(whislo=low, q1=q1, med=median, q3=q3, whishi=high, fliers=[], label=""))
    left.bxp(stats, positions=y, orientation="horizontal", widths=0.55, patch_artist=True,
             boxprops=dict(facecolor="#c5cae9", edgecolor=OURS), medianprops=dict(color=OURS, lw=2),
             whiskerprops=dict(color=OURS), capprops=dict(color=OURS))
    left.axvline(20, color="black", ls="--", lw=1)
    left.text(20, y.max() + 0.6, " r = 20: Markov", fontsize=8, va="bottom")
    left.set_xscale("log")
    left.set_xlim(0.7, 30)
    left.set_xticks([1, 2, 5, 10, 20], ["1", "2", "5", "10", "20"])
    left.minorticks_off()
    left.set_xlabel("R.2 over the heads (min, quartiles, max; log scale)")
    left.set_yticks(y, [textwrap_label(label, 48) for label in labels], fontsize=8)
    for row, yi in zip(rows, y):
        low, median, high = numbers(row[diagonal_column])[:3]
        right.plot([low, high], [yi, yi], color=SOURCE, lw=2)
        right.plot([median], [yi], "o", color=SOURCE)
    right.axvline(0.5, color="black", ls=":", lw=1)
    right.text(0.5, y.max() + 0.6, " random: 0.5", fontsize=8, va="bottom")
    right.set_xlim(0, 1)
    right.set_xlabel("positive fraction of W_q W_k^T's diagonal (min, median, max)")
    fig.suptitle("Markov heads (Definition 1): none reaches r = 20; SmolLM2 has heads with a 99% positive diagonal",
                 fontsize=10)
    fig.tight_layout()
    return [save(fig, out, "gpt_dtma_markov_heads.png")]


def textwrap_label(text: str, width: int) -> str:
    import textwrap
    return "\n".join(textwrap.wrap(text, width))


def figure_msat(root: str, out: str) -> list[str]:
    """Table 2 on mixed-quality data: DT, M-SAT, M-SAT no-PE and MAT (mean ± s.e.m., 3 seeds)
    with the paper's values."""
    path = os.path.join(root, EXPERIMENTS)
    table = find_table(path, "M-SAT")
    ours_column = next(plain(h) for h in table.header if plain(h).startswith("ours:"))
    methods = [m.strip() for m in ours_column[len("ours:"):].split(" / ")]
    paper_names = {"M-SAT": "M-SAT", "M-SAT no-PE": "no-PE", "MAT": "MAT"}
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for ax, (pattern, title, unit) in zip(axes, (
            (r"Table 2, My Way Home", "My Way Home", "return"),
            (r"Table 2, Deadly Corridor", "Deadly Corridor", "return / 100"))):
        row = find_row(path, table, pattern)
        values = [mean_sem(v) for v in plain(row[ours_column]).split(":")[0].split(" / ")]
        paper = named_values(row["paper"], list(paper_names.values()))
        x = np.arange(len(methods))
        ax.bar(x, [m for m, _ in values], 0.6, color=[METHOD_COLOURS[k] for k in range(len(methods))],
               yerr=[s for _, s in values], capsize=3)
        for k, method in enumerate(methods):
            if paper_names.get(method) in paper:
                ax.scatter(x[k] + 0.2, paper[paper_names[method]][0], **PAPER_MARKER,
                           label="the paper" if k == 1 else None)
        ax.set_xticks(x, [m.replace(" ", "\n") for m in methods])
        ax.set_ylabel(unit)
        ax.set_title(f"{title}, mixed-quality data")
        ax.legend(frameon=False, fontsize=8, loc="upper left")
    return [save(fig, out, "msat_table2.png")]


# ---- benchmarks ---------------------------------------------------------------------------------

def env_counts(ax, counts):
    """A log2 x axis labelled with the measured env counts."""
    ax.set_xscale("log", base=2)
    ax.set_xticks(counts, [f"{int(n):,}" for n in counts])
    ax.minorticks_off()


def figure_bench_envs(root: str, out: str) -> list[str]:
    """Env steps per second against the number of parallel envs, ours beside gymnax's bandit."""
    path = os.path.join(root, BENCHMARKS)
    by_env: dict[str, list[tuple[float, float]]] = {}
    for cells in table_rows(path, "Environment steps per second", "env"):
        by_env.setdefault(plain(cells["env"]), []).append((number(cells["N"]), number(cells["steps/s"])))
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.2, 4.2))
    colours = iter(METHOD_COLOURS + ("#6d4c41",))
    for env, points in by_env.items():
        n, rate = np.array(points).T
        theirs = env.startswith("gymnax")
        ax.plot(n, rate, "o--" if theirs else "o-", color="black" if theirs else next(colours),
                lw=2 if theirs else 1.5, ms=4, label=env)
    env_counts(ax, sorted({n for points in by_env.values() for n, _ in points}))
    ax.set_yscale("log")
    ax.set_xlabel("parallel envs (vmap)")
    ax.set_ylabel("env steps per second")
    ax.set_title("jit(scan(vmap(step))) on a 2-core CPU")
    ax.legend(frameon=False, fontsize=8, loc="lower right")
    return [save(fig, out, "bench_env_steps.png")]


def figure_bench_eval(root: str, out: str) -> list[str]:
    """In-context evaluation of the main job's model against the number of envs."""
    path = os.path.join(root, BENCHMARKS)
    rows = table_rows(path, "In-context evaluation against the number of environments", "envs")
    envs = np.array([number(r["envs"]) for r in rows])
    rate = np.array([number(r["env-steps/s"]) for r in rows])
    memory = np.array([number(r["peak RSS (MiB)"]) for r in rows])
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    left.plot(envs, rate, "o-", color=OURS, lw=2)
    left.set_ylabel("env steps per second")
    left.set_ylim(0, rate.max() * 1.15)
    left.yaxis.set_major_formatter("{x:,.0f}")
    right.plot(envs, memory, "o-", color=SOURCE, lw=2)
    right.set_ylabel("peak memory (MiB)")
    right.set_ylim(0, memory.max() * 1.15)
    for ax in (left, right):
        env_counts(ax, envs)
        ax.set_xlabel("environments evaluated at once")
    left.set_title("the main job's model acting in context, 600 steps")
    right.set_title("peak host memory")
    return [save(fig, out, "bench_eval_scaling.png")]


def figure_bench_train(root: str, out: str) -> list[str]:
    """Training throughput (tokens per second) and MFU by model, one run on one host."""
    path = os.path.join(root, BENCHMARKS)
    rows = table_rows(path, "Training throughput (AD", "model")
    labels = [f"{plain(r['model']).split(' (')[0]}\n{plain(r['layers x width'])}, "
              f"{plain(r['batch x context'])}" for r in rows]
    tokens = np.array([number(r["tokens/s"]) for r in rows])
    mfu = np.array([numbers(r["MFU"])[0] for r in rows])
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 0.6 * len(rows) + 1.4), sharey=True)
    y = np.arange(len(rows))[::-1]
    left.barh(y, tokens, color=OURS)
    left.set_xlim(0, tokens.max() * 1.25)
    left.set_xlabel("training tokens per second")
    left.xaxis.set_major_formatter("{x:,.0f}")
    left.set_yticks(y, labels, fontsize=8)
    right.barh(y, mfu, color=SOURCE)
    right.set_xlim(0, 100)
    right.set_xlabel("MFU (% of a float32 matmul's measured peak)")
    for ax, values, fmt in ((left, tokens, "{:,.0f}"), (right, mfu, "{:.0f}%")):
        for yi, v in zip(y, values):
            ax.text(v, yi, " " + fmt.format(v), va="center", fontsize=8)
    left.set_title("throughput")
    right.set_title("model FLOP utilisation")
    return [save(fig, out, "bench_training.png")]


def figure_long_contexts(root: str, out: str) -> list[str]:
    """Peak memory of AD at XLand-100B's size against the context (blockwise attention with
    remat), and our Headless-AD training step's speed-up over the authors' at their layout."""
    path = os.path.join(root, BENCHMARKS)
    rows = [r for r in table_rows(path, "Context length: AD at XLand-100B's size", "context")
            if plain(r["attention"]) == "blockwise + remat" and r["peak RSS (GiB)"].strip()]
    if not rows:
        raise FigureInputError(f"{path}: no 'blockwise + remat' rows in the context-length table")
    context = np.array([number(r["context"]) for r in rows])
    memory = np.array([number(r["peak RSS (GiB)"]) for r in rows])
    section = "Against the authors' model, in one run"
    speed = [dict(zip([plain(h) for h in t.header], row)) for t in read_tables(path)
             if t.section.startswith(section) for row in t.rows]
    speed = [r for r in speed if r.get("speed-up vs theirs", "").strip().endswith("x")]
    if not speed:
        raise FigureInputError(f"{path}: no speed-up rows under a heading {section!r}")
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(12.5, 4.4),
                                      gridspec_kw=dict(width_ratios=(1, 1.1), wspace=0.75))
    order = np.argsort(context)
    left.plot(context[order], memory[order], "o-", color=OURS, lw=2, label="measured")
    slope, intercept = np.polyfit(context, memory, 1)
    left.plot(context[order], slope * context[order] + intercept, "--", color=PAPER,
              label=f"linear fit: {slope * 1024:.1f} GiB per 1,024 tokens")
    for x, y in zip(context, memory):
        left.annotate(f"{y:.1f} GiB", (x, y), textcoords="offset points", xytext=(-6, 4),
                      ha="right", fontsize=8)
    left.set_xticks(context[order], [f"{c:,.0f}" for c in context[order]])
    left.set_xlabel("context (tokens)")
    left.set_ylabel("peak host memory (GiB)")
    left.set_ylim(0, memory.max() * 1.2)
    left.set_xlim(0, context.max() * 1.1)
    left.set_title("AD 8x512, batch 8: blockwise attention + remat", fontsize=10)
    left.legend(frameon=False, fontsize=8, loc="upper left")
    labels = [f"batch {plain(r['batch'])}, dropout {plain(r['attention dropout'])}\n"
              f"{textwrap_label(plain(r['implementation']).removeprefix('ours, '), 34)}"
              for r in speed]
    memory_ratio = [plain(r.get("RSS vs theirs", "")) for r in speed]
    ratio = np.array([numbers(r["speed-up vs theirs"])[0] for r in speed])
    y = np.arange(len(speed))[::-1]
    right.barh(y, ratio, color=[OURS if v >= 2 else SOURCE for v in ratio])
    right.axvline(1, color="black", lw=1)
    right.axvline(2, color=PAPER, ls="--", lw=1)
    right.text(2, y.max() + 0.6, " the goal, 2x", fontsize=8, color="#616161", va="center")
    for yi, v, m in zip(y, ratio, memory_ratio):
        right.text(v, yi, f" {v:.1f}x" + (f" in {m} their memory" if m else ""), va="center",
                   fontsize=8, bbox=dict(facecolor="white", edgecolor="none", pad=1))
    right.set_yticks(y, labels, fontsize=7)
    right.set_xlim(0, max(ratio.max(), 2) * 1.6)
    right.set_ylim(-0.7, y.max() + 1.1)
    right.set_xlabel("training step: the authors' PyTorch time / ours (2 idle cores)")
    right.set_title("Headless-AD at the paper's bandit scale (their layout: 622 tokens)", fontsize=10)
    return [save(fig, out, "long_contexts.png")]


# ---- the environments ---------------------------------------------------------------------------

def grid_path(env, params, state, targets, steps: int):
    """Positions and rewards of one episode stepped through `env.step`, walking straight to each
    cell of `targets` in turn (row first), then standing still."""
    import jax
    import jax.numpy as jnp
    moves = {(-1, 0): 0, (1, 0): 1, (0, -1): 2, (0, 1): 3}  # the order of envs/darkroom.py's atomic moves
    key = jax.random.PRNGKey(0)
    positions, rewards, target = [np.asarray(state.pos)], [], 0
    for _ in range(steps):
        pos = np.asarray(state.pos)
        while target < len(targets) and (pos == targets[target]).all():
            target += 1
        if target < len(targets):
            delta = np.asarray(targets[target]) - pos
            step = (int(np.sign(delta[0])), 0) if delta[0] else (0, int(np.sign(delta[1])))
            action = moves[step]
        else:
            action = 4  # noop
        _, state, reward, terminated, truncated, _ = env.step(key, state, jnp.int32(action), params)
        rewards.append(float(reward))
        if bool(terminated | truncated):  # the state is already the next episode's (auto-reset)
            if bool(terminated):
                positions.append(np.asarray(targets[-1]))
            break
        positions.append(np.asarray(state.pos))
    return np.array(positions), np.array(rewards)


def draw_grid(ax, size: int):
    ax.set_xlim(-0.5, size - 0.5)
    ax.set_ylim(size - 0.5, -0.5)
    ax.set_xticks(np.arange(-0.5, size, 1), minor=True)
    ax.set_yticks(np.arange(-0.5, size, 1), minor=True)
    ax.grid(which="minor", color="#bdbdbd", lw=0.6)
    ax.tick_params(which="both", length=0, labelbottom=False, labelleft=False)
    ax.set_facecolor("#263238")
    ax.set_aspect("equal")


def draw_path(ax, positions, colour="#ffca28"):
    ax.plot(positions[:, 1], positions[:, 0], "-", color=colour, lw=2.5, alpha=0.9)


def figure_envs(root: str, out: str) -> list[str]:
    """Dark Room, Key-to-Door, the point maze and (with xminigrid) XLand, from their own states."""
    import jax
    from icrl_jax.envs.continuous.point_maze import PointMaze
    from icrl_jax.envs.darkroom import DarkRoom, KeyToDoor
    plt = pyplot()
    written = []
    key = jax.random.PRNGKey(3)

    fig, axes = plt.subplots(1, 2, figsize=(8.4, 4.4))
    room = DarkRoom()
    goal = 2 * room.size + 6
    params = room.params_for_goal(goal)
    _, state = room.reset(key, params)
    goal_pos = np.asarray(room.position(params.goal))
    positions, rewards = grid_path(room, params, state, [goal_pos], room.episode_length)
    ax = axes[0]
    draw_grid(ax, room.size)
    ax.add_patch(plt.Rectangle((goal_pos[1] - 0.5, goal_pos[0] - 0.5), 1, 1, color="#66bb6a", alpha=0.8))
    draw_path(ax, positions)
    ax.plot(*positions[0][::-1], "o", color="#ef5350", ms=12)
    ax.set_title(f"Dark Room {room.size}x{room.size}: start at the centre, goal unseen;\n"
                 f"reward 1 a step on it (this path: return {rewards.sum():.0f} in {len(rewards)} steps)",
                 fontsize=9)

    door_env = KeyToDoor()
    key_cell, door_cell = 1 * door_env.size + 1, 7 * door_env.size + 6
    params = door_env.params_for(key_cell, door_cell)
    _, state = door_env.reset(key, params)
    key_pos, door_pos = (np.asarray(door_env.position(c)) for c in (params.key, params.door))
    positions, rewards = grid_path(door_env, params, state, [key_pos, door_pos], door_env.episode_length)
    ax = axes[1]
    draw_grid(ax, door_env.size)
    ax.text(key_pos[1], key_pos[0], "key", ha="center", va="center", color="#ffca28", fontsize=9, weight="bold")
    ax.add_patch(plt.Rectangle((door_pos[1] - 0.5, door_pos[0] - 0.5), 1, 1, color="#8d6e63"))
    ax.text(door_pos[1], door_pos[0], "door", ha="center", va="center", color="white", fontsize=8)
    draw_path(ax, positions, "#4fc3f7")
    ax.plot(*positions[0][::-1], "o", color="#ef5350", ms=12)
    ax.set_title(f"Dark Key-to-Door: random start; +1 at the key, then +1 at the door\n"
                 f"(this path: return {rewards.sum():.0f} in {len(rewards)} steps)", fontsize=9)
    fig.tight_layout()
    written.append(save(fig, out, "env_grids.png"))

    maze = PointMaze(layout="medium", task="random_goal")
    params = jax.tree_util.tree_map(lambda a: a, maze.task_params(5))
    _, state = maze.reset(key, params)

    def expert_step(state, _):
        action = maze.expert_action(state, params)
        _, state, _, terminated, truncated, _ = maze.step(key, state, action, params)
        return state, (state.pos, terminated | truncated)

    _, (trail, done) = jax.lax.scan(expert_step, state, None, length=maze.episode_length)
    trail, done = np.asarray(trail), np.asarray(done)
    end = int(np.argmax(done)) if done.any() else len(done) - 1
    trail = np.concatenate([np.asarray(state.pos)[None], trail[:end]])
    fig, ax = plt.subplots(figsize=(6.4, 5.2))
    for i, j in zip(*np.nonzero(maze.walls)):
        x, y = maze.cell_centre(i, j)
        ax.add_patch(plt.Rectangle((x - 0.5, y - 0.5), 1, 1, color="#37474f"))
    ax.plot(trail[:, 0], trail[:, 1], "-", color=OURS, lw=2)
    ax.plot(*trail[0], "o", color="#ef5350", ms=10, label="start")
    goal = np.asarray(params.goal)
    ax.add_patch(plt.Circle(goal, float(params.goal_radius), color="#66bb6a", alpha=0.5, label="goal radius"))
    ax.set_xlim(-maze.width / 2, maze.width / 2)
    ax.set_ylim(-maze.height / 2, maze.height / 2)
    ax.set_aspect("equal")
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_title(f"point maze ({maze.layout}), random start and goal:\n"
                 f"the waypoint expert reaches the goal in {end + 1} steps", fontsize=9)
    ax.legend(frameon=False, fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    written.append(save(fig, out, "env_point_maze.png"))

    xland = draw_xland(plt, out, key)
    written += xland
    return written


XLAND_SHOWN = ("XLand-MiniGrid-R1-9x9", "XLand-MiniGrid-R4-13x13", "MiniGrid-DoorKey-8x8")


def draw_xland(plt, out: str, key) -> list[str]:
    """XLand-MiniGrid and a MiniGrid env at reset, drawn by xminigrid's own renderer; nothing
    when the `xland` extra is not installed."""
    try:
        from xminigrid.rendering.rgb_render import render
        from icrl_jax.envs.xland import XLandMiniGrid
    except ImportError:
        print("make_figures: the XLand picture needs the xland extra (xminigrid); not drawn")
        return []
    fig, axes = plt.subplots(1, len(XLAND_SHOWN), figsize=(4 * len(XLAND_SHOWN), 4.3))
    for ax, env_id in zip(axes, XLAND_SHOWN):
        env = XLandMiniGrid(env_id, num_rulesets=4) if env_id.startswith("XLand") else XLandMiniGrid(env_id)
        params = env.task_params(0)
        _, state = env.reset(key, params)
        image = render(np.asarray(state.timestep.state.grid), state.timestep.state.agent,
                       int(params.env_params.view_size))
        ax.imshow(image)
        ax.set_title(env_id, fontsize=9)
        ax.axis("off")
    fig.tight_layout()
    return [save(fig, out, "env_xland.png")]


# ---- command line -------------------------------------------------------------------------------

FIGURES = {
    "curves": figure_curves,
    "headless_ad": figure_headless_ad,
    "ngram": figure_ngram,
    "unimask": figure_unimask,
    "gpt_dtma": figure_gpt_dtma,
    "markov_heads": figure_markov_heads,
    "msat": figure_msat,
    "dpt": figure_dpt,
    "bench_envs": figure_bench_envs,
    "bench_eval": figure_bench_eval,
    "bench_train": figure_bench_train,
    "long_contexts": figure_long_contexts,
    "envs": figure_envs,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", default=ROOT, help="the folder the results files are read from")
    parser.add_argument("--out", default=None, help="where the PNGs go (default ROOT/docs/img)")
    parser.add_argument("--only", default="", help=f"comma-separated subset of: {', '.join(FIGURES)}")
    args = parser.parse_args(argv)
    names = [n for n in args.only.split(",") if n] or list(FIGURES)
    unknown = [n for n in names if n not in FIGURES]
    if unknown:
        print(f"make_figures: unknown figure {unknown[0]!r} in --only (known: {', '.join(FIGURES)})",
              file=sys.stderr)
        return 2
    out = args.out or os.path.join(args.root, "docs", "img")
    os.makedirs(out, exist_ok=True)
    try:
        for name in names:
            for path in FIGURES[name](args.root, out):
                print(os.path.relpath(path, args.root) if path.startswith(args.root) else path)
    except FigureInputError as error:  # bad input: one line, exit 2
        print(f"make_figures: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
