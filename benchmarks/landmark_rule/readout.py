"""Does the actor's representation carry what the landmark rule needs? A linear read-out.

The rule reader's warm-up (``configs/landmark-reader.yaml``) left the rule's loss at a coin's.
Reading the rule needs two things in the actor's features at the point where it answers: the
landmark's side, which only the observation shows, and its combination with the lesson's
relation ("same side" or, inverted, "other side"), an exclusive-or. This fits a logistic
read-out on the frozen reader's (``assets/memory-reader/reader.pt``) hidden state at the
answer position, at a few layers, on the warm-up's own prompts of the 192 training dungeons,
and scores it on the 128 ``test_large`` dungeons (never trained on):

* ``landmark``: the landmark's side from the prompt without a lesson;
* ``rule``: the side to take from the prompt with the rule or its inversion (the warm-up's
  label: the landmark's side for the rule, the other side for the inversion).

    python -m benchmarks.landmark_rule.readout      # writes benchmarks/results/landmark_readout.json
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from benchmarks.common import REPO, RESULTS  # noqa: E402
from comprl_gym.agents.prompts import PromptConfig  # noqa: E402
from comprl_gym.envs.memory.lessons import reading_examples  # noqa: E402
from comprl_gym.registration import ENV_TABLE  # noqa: E402
from comprl_gym.seeding import seed_everything  # noqa: E402
from comprl_gym.trainers.config import TrainConfig  # noqa: E402
from comprl_gym.trainers.policy import PolicyOptimizer  # noqa: E402
from comprl_gym.trainers.warmup import reading_samples  # noqa: E402
from comprl_gym.utils import atomic_write_json  # noqa: E402

CONFIG = REPO / "configs" / "landmark-reader.yaml"
ENV_ID = "comprl/Memory-Landmark-v0"
LAYERS = (8, 16, 24, 30)


def prompts(config: TrainConfig, split: str, kind: str, tokenizer) -> list[tuple[list[int], str]]:
    """The warm-up's prompts of ``split`` in ``kind`` (``none``: one per dungeon, labelled
    with the landmark's side; ``rule``: the rule and its inversion), each with its label."""
    # The arguments the env is made with: its registered ones, then the run's.
    kwargs = {**ENV_TABLE[ENV_ID].kwargs, **config.env_kwargs.get(ENV_ID, {})}
    sides = {e.task_id: e.answer for e in reading_examples(split, ["rule"], "true", kwargs)}
    if kind == "none":
        examples = [e for e in reading_examples(split, ["none"], "both", kwargs)]
        seen: set[str] = set()
        examples = [e for e in examples if not (e.task_id in seen or seen.add(e.task_id))]
    else:
        examples = reading_examples(split, ["rule"], "both", kwargs)
    config.warmup.split = split
    prompt = PromptConfig(conversation=config.conversation, history_window=config.history_turns)
    samples = reading_samples(config, [(ENV_ID, e) for e in examples], tokenizer, prompt)
    out = []
    for example, sample in zip(examples, samples):
        ids = sample.input_ids[: sample.action_mask.index(1)]
        out.append((ids, sides[example.task_id] if kind == "none" else example.answer))
    return out


def features(actor: PolicyOptimizer, items: list[tuple[list[int], str]]) -> dict[int, np.ndarray]:
    """The hidden state at each prompt's last position, per layer of :data:`LAYERS`."""
    rows: dict[int, list[np.ndarray]] = {layer: [] for layer in LAYERS}
    actor.model.eval()
    with torch.no_grad():
        for ids, _ in items:
            tensor = torch.tensor([ids])
            out = actor.model(input_ids=tensor, output_hidden_states=True)
            for layer in LAYERS:
                rows[layer].append(out.hidden_states[layer][0, -1].float().numpy())
    return {layer: np.stack(v) for layer, v in rows.items()}


def main(argv: list[str] | None = None) -> int:
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(RESULTS / "landmark_readout.json"))
    args = parser.parse_args(argv)
    seed_everything(0)
    config = TrainConfig.from_yaml(CONFIG)
    actor = PolicyOptimizer.from_settings(config.actor, "actor", trainable=False)
    result: dict = {"config": str(CONFIG.relative_to(REPO)), "layers": list(LAYERS), "reads": {}}
    for kind in ("none", "rule"):
        train = prompts(config, "train", kind, actor.tokenizer)
        test = prompts(config, "test_large", kind, actor.tokenizer)
        x_train, x_test = features(actor, train), features(actor, test)
        y_train = np.array([label == "east" for _, label in train])
        y_test = np.array([label == "east" for _, label in test])
        per_layer = {}
        for layer in LAYERS:
            probe = make_pipeline(StandardScaler(), LogisticRegression(C=0.1, max_iter=2000))
            probe.fit(x_train[layer], y_train)
            per_layer[str(layer)] = {
                "train_accuracy": float(probe.score(x_train[layer], y_train)),
                "held_out_accuracy": float(probe.score(x_test[layer], y_test)),
            }
            print(kind, layer, per_layer[str(layer)], flush=True)
        result["reads"]["landmark" if kind == "none" else "rule"] = {
            "train_prompts": len(train),
            "held_out_prompts": len(test),
            "east_share_held_out": float(y_test.mean()),
            "per_layer": per_layer,
        }
    atomic_write_json(args.out, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
