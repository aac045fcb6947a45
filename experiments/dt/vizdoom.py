"""Decision Transformer family on ViZDoom My Way Home and Deadly Corridor, from pixels.

`make_config(method, scenario, preset, no_pe)` is shared by the entry files
`{dt,msat,mat,msat_nope}_{my_way_home,deadly_corridor}.py`; the no-PE ablation is
`msat_nope_*.py`, or `--config.model.timestep_encoding=none` on any of them.

Data: `DoomExpert` (privileged planner, `envs/host/vizdoom.py`) with per-env action noise spread
over `data.noise` (low, high), recorded through the bridge into a pixel store of 72x128 RGB
frames, frame skip 4 (paper 7.2.1), one history per complete episode; shared by every config
that records the same data (`runs/datasets/vizdoom_<scenario>_<steps>steps_..._seed<seed>`).
The paper's data came from an APPO agent (7.5); any such dataset can be imported in the
documented episode format (`python -m icrl_jax.experiments.host.record_doom import ...`).

Paper scale (default) = the M-SAT paper's Tables 4 (My Way Home) and 5 (Deadly Corridor):
8 layers, 8 heads, d_model 128, batch 128, lr 5e-3, 500K steps of data, 5 epochs
(5 x 500K / 128 ~ 19.5K updates), context 30 (MWH) / 60 (DC), dropouts embed/residual/attention
0.1/0.01/0.1 (MWH) and 0.1/0.1/0.3 (DC), warmup 10240 (MWH) / 2000 (DC), eval target 1.8 (MWH)
/ 29 (DC). Deviations, stated: the paper's DC rewards are ViZDoom's / 100 (its maximum 22.0 vs
our ~2300), so DC returns-to-go are scaled by 100 (`model.rtg_scale`) and the target is 2900;
the state CNN is `CNNEncoder` (3 strided 4x4 convs 32/64/64), the paper does not specify its own;
one update per jitted call (`train.steps_per_call=1`: a call's windows are one loader batch of
128 x K frames).

Mixed-quality data (the expert's data on My Way Home are near-perfect, so the methods tie):
`:mixed` / `:quick_mixed` spread the action noise over (0.2, 1.0), the last env uniform random;
successful episodes are short, so they outnumber the failures by episode count while failures
fill much of the steps. `:context60` is Table 3's My Way Home run (context 60).
Table 2 as one `icrl-jax report` (DT, M-SAT, MAT, M-SAT no-PE x 3 seeds on one dataset):
`experiments/dt/table2_{my_way_home,deadly_corridor}.py`.

`:quick` (minutes on a 2-core CPU): the same data pipeline at 20K steps (DC 30K; the recorder
stops after the call that passes it), frames average-pooled 2x to 36x64 inside the model
(`model.obs_pool`), CNN 16/32/32, d_model 64, 2 layers, 4 heads, no dropout, context 10 for both
scenarios (the paper: 30 / 60; longer contexts train too slowly on a CPU), batch 16, 1200
updates, lr 1e-3 with 100 warmup steps; evaluation on 8 envs x 700 steps (MWH) / 800 steps (DC),
target 1.0 (MWH) / 2300 (DC, about the best dataset return), scoring the episodes that start
early enough to finish (`episode_stats`), also after 400 and 800 updates (`eval.every`; the
paper: after each epoch). These are far below the paper's budget.
"""

from icrl_jax.core.config import apply_preset, base_config
from icrl_jax.methods.fields import dt_model_config

SCENARIOS = ("my_way_home", "deadly_corridor")

#: Tables 4 and 5 of the M-SAT paper (per scenario).
PAPER = {
    "my_way_home": dict(seq_len=30, embedding_dropout=0.1, residual_dropout=0.01,
                        attention_dropout=0.1, warmup_steps=10_240, target=1.8, rtg_scale=1.0),
    "deadly_corridor": dict(seq_len=60, embedding_dropout=0.1, residual_dropout=0.1,
                            attention_dropout=0.3, warmup_steps=2_000, target=2900.0,
                            rtg_scale=100.0),
}


def quick_preset(scenario: str) -> dict:
    mwh = scenario == "my_way_home"
    return {
        "data.num_steps": 20_000 if mwh else 30_000,
        "data.num_envs": 8,
        "model.d_model": 64, "model.num_layers": 2, "model.num_heads": 4,
        "model.embedding_dropout": 0.0, "model.residual_dropout": 0.0,
        "model.attention_dropout": 0.0,
        "model.cnn_channels": (16, 32, 32), "model.obs_pool": 2,
        "train.num_steps": 1200, "train.batch_size": 16, "train.seq_len": 10,
        "train.learning_rate": 1e-3, "train.warmup_steps": 100, "train.steps_per_call": 5,
        "train.log_every": 100, "train.checkpoint_every": 400, "eval.every": 400,
        "eval.num_envs_per_task": 8, "eval.num_steps": 700 if mwh else 800,
        "eval.target_returns": (1.0,) if mwh else (2300.0,),
    }


#: Table 2's rows as `icrl-jax report` columns: the method, and M-SAT without positions.
TABLE2_COLUMNS = {"DT": (("method", "dt"),), "M-SAT": (("method", "msat"),),
                  "MAT": (("method", "mat"),),
                  "M-SAT-no-PE": (("method", "msat"), ("model.timestep_encoding", "none"))}
#: Per scenario, the eval.json metrics the table reads (`model@<target>_<metric>`).
TABLE2_METRICS = {"my_way_home": ("return_counted", "success"),
                  "deadly_corridor": ("return_paper_units", "return_counted")}
MIXED = {"data.noise": (0.2, 1.0)}


def presets(scenario: str) -> dict[str, dict]:
    quick = quick_preset(scenario)
    out = {"quick": quick, "mixed": MIXED, "quick_mixed": dict(quick, **MIXED)}
    if scenario == "my_way_home":  # Table 3: the baseline with a longer context
        out["context60"] = {"train.seq_len": 60}
    return out


def table2_config(scenario: str, preset: str = ""):
    """Table 2 (and Table 3 with `:context60`) as one `icrl-jax report`: every method as a
    column, `report.num_seeds` seeds each (the paper: 5), one shared dataset."""
    import ml_collections

    from icrl_jax.reports.fields import columns_report_fields
    config = make_config("msat", scenario, preset)
    config.experiment = f"msat_table2_{scenario}"
    config.columns = ml_collections.ConfigDict(TABLE2_COLUMNS)
    config.report.update(dict(columns_report_fields(), num_seeds=3,
                              metrics=TABLE2_METRICS[scenario]))
    return config


def make_config(method: str, scenario: str, preset: str = "", no_pe: bool = False):
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown scenario {scenario!r}; choose from {SCENARIOS}")
    paper = PAPER[scenario]
    config = base_config()
    config.experiment = f"{method}{'_nope' if no_pe else ''}_{scenario}"
    config.method = method
    config.env.name = "vizdoom"
    config.env.kwargs.scenario = scenario
    config.data.source = "doom_expert"
    config.data.builder = "vizdoom_expert"  # icrl_jax/data/builders.py
    config.data.num_steps = 500_000  # Tables 4-5: "number of timesteps of training data"
    config.data.num_envs = 16  # recording worker processes
    config.data.noise = (0.05, 0.3)  # per-env action noise, spread over the envs
    config.data.steps_per_call = 1000  # bridge steps per jitted recording call
    config.model.update(dt_model_config())
    config.model.d_model = 128
    config.model.num_layers = 8
    config.model.num_heads = 8
    config.model.embedding_dropout = paper["embedding_dropout"]
    config.model.residual_dropout = paper["residual_dropout"]
    config.model.attention_dropout = paper["attention_dropout"]
    config.model.rtg_scale = paper["rtg_scale"]
    config.model.max_timestep = 600  # the scenarios' 2100-tic limit is 525 steps at frame skip 4
    config.model.timestep_encoding = "none" if no_pe else "timestep"
    config.train.num_steps = 19_500  # 5 epochs: 5 x 500K / 128
    config.train.batch_size = 128
    config.train.seq_len = paper["seq_len"]
    config.train.learning_rate = 5e-3
    config.train.warmup_steps = paper["warmup_steps"]
    config.train.steps_per_call = 1
    config.train.log_every = 100
    config.train.checkpoint_every = 1000
    config.eval.greedy = False  # the paper samples each component from its categorical
    config.eval.num_envs_per_task = 16
    config.eval.num_steps = 1050  # two 525-step time limits per env
    config.eval.target_returns = (paper["target"],)
    config.eval.every = 3900  # after each of the 5 epochs, as Fig. 3 (curves.png of a table)
    config.eval.tasks = "train"
    config.eval.baselines = ()  # simulator time goes to the model; the dataset's returns are the reference
    return apply_preset(config, presets(scenario), preset)
