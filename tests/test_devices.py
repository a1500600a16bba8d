"""One device decision: every model, adapter, optimiser state and generation backend of a
trainer on the configured device in the configured dtype (also after resume); CUDA asked for
where there is none fails at start naming the setting; the weight push merges LoRA one tensor
at a time instead of copying the model."""

from __future__ import annotations

import copy
import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from comprl_gym.core import ConfigurationError  # noqa: E402
from comprl_gym.llm.devices import placement_errors, resolve_placement  # noqa: E402
from comprl_gym.trainers import TrainConfig, make_trainer  # noqa: E402
from comprl_gym.trainers.config import LoraSettings, ModelSettings  # noqa: E402
from comprl_gym.trainers.losses import CISPO  # noqa: E402
from comprl_gym.trainers.policy import PolicyOptimizer, TrainSample  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")

NO_CUDA = not torch.cuda.is_available()


def _config(tmp_path, algorithm, model=None, **overrides):
    model = {"model": "tiny", "lr": 1e-2, "max_new_tokens": 6, **(model or {})}
    data = {
        "algorithm": algorithm,
        "seed": 1,
        "env_ids": ["comprl/MiniHack-Room-5x5-v0"],
        "iterations": 1,
        "groups_per_iteration": 1,
        # two rollouts per half: a within-half advantage, so the actor steps
        "group_size": 2 if algorithm == "grpo" else 4,
        "max_episode_steps": 2,
        "task_pool": 4,
        "invalid_action_penalty": 0.5,
        "actor": model,
        "extractor": {**model, "max_new_tokens": 8},
        "experience": {
            "extractor_format": "plain",
            "search_and_ask_budget": 0,
            "inject_top_k": 1,
            "min_uses": 1,
            "extractor_batch_size": 2,
            "train_cooldown_steps": 0,
            "async_extraction": False,
            "diversify": False,
        },
        "output_dir": str(tmp_path / algorithm),
        "eval_tasks": 0,
        "progress": False,
        "tensorboard": False,
        "torch_threads": 1,
        **overrides,
    }
    return TrainConfig.from_dict(data)


def _models(trainer):
    """(label, module) of every model the trainer holds, its backends' included."""
    found = [("actor", trainer.actor.model)]
    backend_model = getattr(trainer.actor_backend, "model", None)
    if backend_model is not None:
        found.append(("actor backend", backend_model))
    if trainer.extractor is not None:
        found.append(("extractor", trainer.extractor.optimizer.model))
        backend = getattr(trainer.extractor, "backend", None)
        if backend is not None and getattr(backend, "model", None) is not None:
            found.append(("extractor backend", backend.model))
    return found


def _optimizer_state_tensors(optimizer):
    for state in optimizer.optimizer.state.values():
        for key, value in state.items():
            if isinstance(value, torch.Tensor) and key != "step":  # AdamW keeps step on CPU
                yield value


def _train(trainer):
    """Play the iterations, then one more step of each model that trains (a random tiny model
    often earns every episode the same reward: no advantage, no step), and checkpoint."""
    trainer.train()
    sample = TrainSample([5, 6, 7, 8, 9], [0, 0, 1, 1, 1], advantage=1.0)
    trainer.actor.update([sample])
    if trainer.extractor is not None:
        trainer.extractor.optimizer.update([sample])
    _check_steps(trainer)
    trainer.save_checkpoint()


def _check_steps(trainer):
    """The models that train took steps, so their optimiser state exists to be checked."""
    optimizers = [(trainer.actor, trainer.trains_actor)]
    if trainer.extractor is not None:
        optimizers.append((trainer.extractor.optimizer, trainer.trains_extractor))
    for optimizer, trains in optimizers:
        assert (optimizer.steps > 0 and bool(optimizer.optimizer.state)) == trains


def _check_placement(trainer, device, dtype):
    placement = resolve_placement(device, dtype)
    for label, module in _models(trainer):
        errors = placement_errors(module, placement)
        assert not errors, f"{label}: {errors[:5]}"
    optimizers = [trainer.actor] + ([trainer.extractor.optimizer] if trainer.extractor else [])
    for optimizer in optimizers:
        assert optimizer.compute_dtype == placement.dtype
        for tensor in _optimizer_state_tensors(optimizer):
            assert tensor.device == placement.device and tensor.dtype == torch.float32
    # The backends hold their model's very device object: no second decision anywhere.
    assert trainer.actor_backend.device is trainer.actor.device
    if trainer.extractor is not None:
        assert trainer.extractor.backend.device is trainer.extractor.optimizer.device


@pytest.mark.slow
@pytest.mark.parametrize(
    "algorithm", ["grpo", "complementary", "static_experience", "experience_only"]
)
def test_every_trainer_places_every_tensor_on_the_configured_device_also_after_resume(
    tmp_path, algorithm
):
    cfg = _config(tmp_path, algorithm)
    trainer = make_trainer(cfg)
    try:
        _check_placement(trainer, "cpu", "float32")
        _train(trainer)  # an update fills the optimiser state
        _check_placement(trainer, "cpu", "float32")
    finally:
        trainer.close()
    resumed = make_trainer(cfg)
    try:
        assert resumed.iteration == 1  # it did resume
        _check_steps(resumed)
        _check_placement(resumed, "cpu", "float32")
    finally:
        resumed.close()


@pytest.mark.slow
def test_a_bfloat16_config_stores_the_frozen_base_in_bfloat16_and_trains_float32_adapters(
    tmp_path,
):
    lora = {"enabled": True, "r": 4, "top_layers": 1}
    cfg = _config(tmp_path, "complementary", model={"dtype": "bfloat16", "lora": lora})
    trainer = make_trainer(cfg)
    try:
        for model in (trainer.actor.model, trainer.extractor.optimizer.model):
            # Read the dtypes directly: the frozen base in bfloat16, the adapters in float32.
            base = {p.dtype for n, p in model.named_parameters() if "lora_" not in n}
            adapters = {p.dtype for n, p in model.named_parameters() if "lora_" in n}
            assert base == {torch.bfloat16} and adapters == {torch.float32}
            assert all(p.requires_grad == ("lora_" in n) for n, p in model.named_parameters())
        _check_placement(trainer, "cpu", "bfloat16")
        before = {k: v.clone() for k, v in trainer.actor.model.named_parameters() if "lora_B" in k}
        _train(trainer)
        after = dict(trainer.actor.model.named_parameters())
        assert any(not torch.equal(v, after[k]) for k, v in before.items())
        _check_placement(trainer, "cpu", "bfloat16")
    finally:
        trainer.close()
    resumed = make_trainer(cfg)
    try:
        _check_steps(resumed)
        _check_placement(resumed, "cpu", "bfloat16")
    finally:
        resumed.close()


@pytest.mark.skipif(not NO_CUDA, reason="this machine has CUDA: the config would be valid")
@pytest.mark.parametrize(
    ("algorithm", "section", "device"),
    [("grpo", "actor", "cuda"), ("complementary", "extractor", "cuda:0")],
)
def test_a_cuda_config_without_cuda_fails_at_start_naming_the_setting(
    tmp_path, algorithm, section, device
):
    cfg = _config(tmp_path, algorithm)
    getattr(cfg, section).device = device
    with pytest.raises(ConfigurationError, match=rf"{section}\.device is '{device}'.*no CUDA"):
        make_trainer(cfg)
    assert not (tmp_path / algorithm / "metrics.jsonl").exists()  # nothing was played


def test_a_device_that_is_no_device_is_refused_with_the_choices():
    with pytest.raises(ConfigurationError, match=r"extractor\.device must be auto, cpu, cuda"):
        resolve_placement("gpu0", setting="extractor")
    with pytest.raises(ConfigurationError, match=r"actor\.dtype must be auto or one of"):
        resolve_placement("cpu", "float16", setting="actor")
    with pytest.raises(ConfigurationError, match="must be one of"):
        TrainConfig.from_dict({"actor": {"dtype": "half"}})


def test_the_placement_check_sees_a_tensor_off_device_or_in_the_wrong_dtype():
    placement = resolve_placement("cpu", "bfloat16")
    layer = torch.nn.Linear(4, 4).to(torch.bfloat16)
    layer.weight.requires_grad_(False)
    layer.bias.requires_grad_(False)
    assert placement_errors(layer, placement) == []
    layer.bias.requires_grad_(True)  # a trained weight must be float32
    assert placement_errors(layer, placement) == [
        "bias: parameter in torch.bfloat16, not torch.float32"
    ]
    layer.bias.requires_grad_(False)
    layer.register_buffer("scale", torch.zeros(2, device="meta"))
    assert placement_errors(layer, placement) == ["scale: buffer on meta, not cpu"]


def test_a_backend_refuses_a_device_its_model_is_not_on():
    from comprl_gym.llm.transformers_backend import TransformersBackend

    opt = PolicyOptimizer.from_settings(ModelSettings(model="tiny", device="cpu"))
    backend = TransformersBackend(model_object=opt.model, tokenizer_object=opt.tokenizer)
    assert backend.device == torch.device("cpu")  # the model's own, not "cuda when present"
    same = TransformersBackend(
        model_object=opt.model, tokenizer_object=opt.tokenizer, device=opt.device
    )
    assert same.device is opt.device
    elsewhere = torch.nn.Linear(2, 2, device="meta")  # a model that is not on the CPU
    with pytest.raises(ConfigurationError, match="asked for device cpu but its model sits on meta"):
        TransformersBackend(model_object=elsewhere, tokenizer_object=opt.tokenizer, device="cpu")


def test_gradient_checkpointing_takes_the_same_step():
    sample = TrainSample([5, 6, 7, 8, 9, 10], [0, 0, 1, 1, 1, 1], advantage=1.0)
    weights = []
    for checkpointing in (False, True):
        settings = ModelSettings(model="tiny", lr=1e-2, gradient_checkpointing=checkpointing)
        opt = PolicyOptimizer.from_settings(settings, loss=CISPO())
        assert opt.model.is_gradient_checkpointing == checkpointing
        initial = {k: v.detach().clone() for k, v in opt.model.named_parameters()}
        opt.update([sample])
        weights.append({k: v.detach().clone() for k, v in opt.model.named_parameters()})
    plain, checkpointed = weights
    assert any(not torch.equal(initial[k], checkpointed[k]) for k in initial)  # a real step
    assert all(torch.allclose(plain[k], checkpointed[k], atol=1e-6) for k in plain)


# ---------------------------------------------------------------------- the weight push
def _lora_optimizer(model, top_layers):
    settings = ModelSettings(
        model=model, lr=1e-2, lora=LoraSettings(enabled=True, r=8, top_layers=top_layers)
    )
    opt = PolicyOptimizer.from_settings(settings, loss=CISPO())
    # One step, so that lora_B is no longer zero and the merge changes the weights.
    opt.update([TrainSample([5, 6, 7, 8, 9], [0, 0, 1, 1, 1], advantage=1.0)])
    return opt


def _deepcopy_push(opt):
    """The push before the change: merge a deep copy of the PEFT model."""
    merged = copy.deepcopy(opt.model).merge_and_unload()
    return {k: v.detach() for k, v in merged.state_dict().items()}


def test_the_streamed_push_equals_peft_merge_and_leaves_the_adapters_alone():
    opt = _lora_optimizer("tiny", top_layers=1)
    adapters = {k: v.clone() for k, v in opt.model.state_dict().items() if "lora_" in k}
    expected = _deepcopy_push(opt)
    streamed = list(opt.rollout_weights())
    assert [name for name, _ in streamed] == list(expected)  # same names, same order
    assert all(torch.equal(tensor, expected[name]) for name, tensor in streamed)
    merged_layer = "model.layers.1.self_attn.q_proj.weight"  # adapted (top block)
    base = opt.model.get_base_model().model.layers[1].self_attn.q_proj.base_layer.weight
    assert not torch.equal(dict(streamed)[merged_layer], base)
    assert all(torch.equal(v, opt.model.state_dict()[k]) for k, v in adapters.items())
    # A transformers backend loaded with the stream scores like the trained model.
    from comprl_gym.llm.transformers_backend import TransformersBackend

    target = TransformersBackend("tiny", device="cpu", prefix_cache_tokens=0)
    target.update_weights(opt.rollout_weights())
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    with torch.no_grad():
        want = opt.model(input_ids=ids).logits
        got = target.model(input_ids=ids).logits
    assert torch.allclose(want, got, atol=1e-5)


def peak_tensor_bytes(fn):
    """Peak bytes of CPU tensor memory held during ``fn()`` beyond what was held before (torch's
    profiler records every CPU allocation and free)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = sorted(prof.events(), key=lambda e: e.time_range.start)
    held = peak = 0
    for event in events:
        held += event.self_cpu_memory_usage
        peak = max(peak, held)
    return peak


def _push_peaks(model, top_layers):
    """(model bytes, peak extra bytes of the deep-copy push, of the streamed push) for a push
    into a transformers backend's copy of the model (the engine's own weights)."""
    from comprl_gym.llm.transformers_backend import TransformersBackend

    opt = _lora_optimizer(model, top_layers)
    target = TransformersBackend(model, device="cpu", prefix_cache_tokens=0)
    params = sum(p.numel() * p.element_size() for p in opt.model.parameters())
    before = peak_tensor_bytes(lambda: target.update_weights(_deepcopy_push(opt)))
    after = peak_tensor_bytes(lambda: target.update_weights(opt.rollout_weights()))
    return params, before, after


def test_the_weight_push_allocates_no_second_copy_of_the_tiny_model():
    params, before, after = _push_peaks("tiny", top_layers=1)
    assert before >= 0.9 * params  # the deep copy held the whole model once more
    assert after < 0.5 * params, (params, before, after)


@pytest.mark.slow
def test_the_weight_push_allocates_no_second_copy_of_smollm2():
    # The demo's LoRA: the top 8 of SmolLM2's 30 blocks (docs/gpu.md quotes these figures).
    params, before, after = _push_peaks("smollm2", top_layers=8)
    assert before >= 0.9 * params
    assert after < 0.05 * params, (params, before, after)


@pytest.mark.skipif(not NO_CUDA, reason="this machine has CUDA: the configs would start")
@pytest.mark.parametrize("name", ["gpu-1.yaml", "paper-table-gpu.yaml"])
def test_the_gpu_configs_load_and_refuse_to_start_without_cuda(tmp_path, name):
    path = os.path.join(os.path.dirname(__file__), "..", "configs", name)
    cfg = TrainConfig.from_yaml(path, [f"output_dir={tmp_path}"])
    assert cfg.actor.device == cfg.extractor.device == "cuda"
    with pytest.raises(ConfigurationError, match=r"actor\.device is 'cuda'"):
        make_trainer(cfg)
