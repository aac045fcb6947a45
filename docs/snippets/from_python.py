from icrl_jax.pipeline import run
from icrl_jax.core.config import set_dotted
from icrl_jax.experiments.ad import darkroom  # experiments/ad/darkroom.py

config = darkroom.get_config("quick")  # the main job's preset, as --config ...darkroom.py:quick
set_dotted(config, "train.num_steps", 100)  # as --config.train.num_steps=100 (the preset: 2,000)
config.workdir = "runs/api_example"
config.run.evaluate = False  # evaluate explicitly below
config = run.resolve_config(config)  # validates every field, writes config.json
run.train(config)  # generates the learning histories, trains, checkpoints
results = run.evaluate(config)  # in context on the held-out goals, next to source and random
print(f"normalised score {results['normalised_score']:.2f} "
      f"(random 0, source 1) over {results['num_envs']} rollouts")
