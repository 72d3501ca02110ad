"""The experiment- and model-file layouts the table generators in this folder share
(scenarios/README.md, experiments/NAME.yaml, models/NAME.yaml): one writer each, so every generated
file reads the same way."""
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def write_experiment(name, model, cluster, gpus, training, plan, measured, notes):
    """Writes experiments/NAME.yaml. `training` is the flow mapping's text ({global_batch: ...}),
    `plan` and `measured` lists of 'key: value' lines in file order."""
    lines = ["experiment:", f"  model: ../models/{model}.yaml", f"  cluster: ../clusters/{cluster}.yaml",
             f"  gpus: {gpus}", f"  training: {training}", "  plan:"]
    lines += [f"    {x}" for x in plan]
    lines += ["  measured:"] + [f"    {x}" for x in measured] + [f"  notes: \"{notes}\""]
    with open(os.path.join(ROOT, "experiments", name + ".yaml"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("wrote", name)


def write_model(name, fields, source, notes):
    """Writes models/NAME.yaml: `fields` a list of (key, value) pairs in file order after the name,
    then the quoted source and notes."""
    lines = ["model:", f"  name: {name}"] + [f"  {k}: {v}" for k, v in fields]
    lines += [f"  source: \"{source}\"", f"  notes: \"{notes}\""]
    with open(os.path.join(ROOT, "models", name + ".yaml"), "w") as f:
        f.write("\n".join(lines) + "\n")
