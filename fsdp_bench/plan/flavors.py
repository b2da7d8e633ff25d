"""Named model sizes as plain data (no torch), so collection and validation stay import-light."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fsdp_bench.plan.architectures import ARCHITECTURES, HF_MODEL_TYPES, Architecture

CONFIG_DIR = Path(__file__).resolve().parent / "configs"  # shipped Hugging Face configs (no weights)


@dataclass(frozen=True)
class ModelFlavor:
    """A named model size. `family` picks the builder (plan.architectures.BUILDERS); `config` is
    passed to it. What the flavor is (tokens or features, built on meta, its shape model) is its
    architecture's row (`architecture`): a Hugging Face flavor's from its config's model_type."""

    name: str
    family: str  # "linear", "gpt" or "hf" (a transformers causal LM from a shipped or local config)
    config: Mapping[str, Any]
    max_seq_len: int | None  # longest sequence the model accepts (None: any)
    description: str

    @property
    def architecture(self) -> Architecture:
        """The catalog row: the project's own model by its builder, a Hugging Face one by model_type."""
        if self.family != "hf":
            return ARCHITECTURES[self.family]
        return _hf_row(self)

    @property
    def takes_tokens(self) -> bool:
        """A language model (token ids in, next-token loss); the linear stack takes vectors."""
        return self.family == "hf" or self.architecture.takes_tokens

    @property
    def from_hf_config(self) -> bool:
        """Built by transformers from a config (shipped or local): its tokenizer, vocab and shapes
        come from there."""
        return self.family == "hf"

    @property
    def built_on_meta(self) -> bool:
        """Built on the meta device and materialized after sharding (big HF models never exist
        whole on one rank)."""
        return self.family == "hf" or self.architecture.built_on_meta


def _linear(name: str, dim: int, n_layers: int, description: str) -> ModelFlavor:
    return ModelFlavor(name, "linear", {"dim": dim, "n_layers": n_layers}, None, description)


def _gpt(name: str, n_layer: int, n_head: int, n_embd: int, vocab: int, block: int, description: str) -> ModelFlavor:
    config = {"n_layer": n_layer, "n_head": n_head, "n_embd": n_embd, "vocab_size": vocab, "block_size": block}
    return ModelFlavor(name, "gpt", config, block, description)


# Tiny versions keep the architecture (attention kind, GQA ratio, norm, activation, tying) and
# shrink only the sizes, so CPU tests run the same code paths as the 7B model.
_TINY_LLAMA = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "vocab_size": 512,
    "max_position_embeddings": 256,
    "bos_token_id": 1,
    "eos_token_id": 2,
}


def _hf(
    name: str, config_file: str, max_seq_len: int, description: str, overrides: Mapping[str, Any] | None = None
) -> ModelFlavor:
    config = {"config_file": config_file, "overrides": dict(overrides or {})}
    return ModelFlavor(name, "hf", config, max_seq_len, description)


MODEL_FLAVORS: dict[str, ModelFlavor] = {
    f.name: f
    for f in (
        _linear("linear_tiny", 256, 4, "4 x Linear(256, 256): CPU tests"),
        _linear("linear_small", 2048, 8, "8 x Linear(2048, 2048), 34M params"),
        _linear("linear_odsc", 16384, 9, "9 x Linear(16384, 16384), 2.4B params, the ODSC tutorial's 9 GiB model"),
        _gpt("gpt_tiny", 2, 2, 64, 512, 256, "nanoGPT-style, 2 layers, d=64: CPU tests"),
        _gpt("gpt_small", 4, 4, 256, 4096, 512, "nanoGPT-style, 4 layers, d=256, 4.2M params: CPU sweeps"),
        _gpt("gpt_124m", 12, 12, 768, 50304, 1024, "GPT-2 124M shape (nanoGPT)"),
        _gpt("gpt_350m", 24, 16, 1024, 50304, 1024, "GPT-2 350M (medium) shape"),
        _hf("qwen2_1_5b", "qwen2_1.5b.json", 32768, "Qwen2-1.5B shape (transformers Qwen2ForCausalLM), 1.54B params"),
        _hf(
            "qwen2_tiny",
            "qwen2_1.5b.json",
            256,
            "Qwen2 architecture, 2 layers, d=64, GQA 4:1 heads: CPU tests",
            {**_TINY_LLAMA, "num_key_value_heads": 1},
        ),
        _hf(
            "codellama_7b",
            "codellama_7b.json",
            16384,
            "CodeLlama-7B / Llama-2-7B shape (LlamaForCausalLM), 6.7B params",
        ),
        _hf(
            "codellama_tiny",
            "codellama_7b.json",
            256,
            "Llama-2 architecture (MHA), 2 layers, d=64: CPU tests",
            {**_TINY_LLAMA, "num_key_value_heads": 4},
        ),
        _hf("llama3_8b", "llama3_8b.json", 8192, "Llama-3-8B shape (LlamaForCausalLM, GQA 4:1), 8.0B params"),
        _hf(
            "llama3_1b",
            "llama3_8b.json",
            8192,
            "Llama-3.2-1B shape (16 layers, d=2048, GQA 4:1, tied), 1.24B params: the MFU reference model",
            {
                "hidden_size": 2048,
                "intermediate_size": 8192,
                "num_hidden_layers": 16,
                "num_attention_heads": 32,
                "num_key_value_heads": 8,
                "tie_word_embeddings": True,
            },
        ),
        _hf(
            "llama3_tiny",
            "llama3_8b.json",
            256,
            "Llama-3 architecture (GQA 4:1), 2 layers, d=64: CPU tests",
            {**_TINY_LLAMA, "num_key_value_heads": 1},
        ),
        _hf("gpt2_124m", "gpt2_124m.json", 1024, "GPT-2 124M (transformers GPT2LMHeadModel)"),
        _hf(
            "gpt2_tiny",
            "gpt2_124m.json",
            256,
            "GPT-2 architecture, 2 layers, d=64: CPU tests",
            {
                "n_embd": 64,
                "n_layer": 2,
                "n_head": 4,
                "vocab_size": 512,
                "n_positions": 256,
                "bos_token_id": 0,
                "eos_token_id": 0,
            },
        ),
    )
}

HF_PREFIX = "hf:"


def is_hf_path(model: str) -> bool:
    """`hf:PATH` names a local Hugging Face model folder."""
    return model.startswith(HF_PREFIX) and len(model) > len(HF_PREFIX)


# The Hugging Face model types are the catalog's (plan.architectures), each with the size fields it
# needs: every one must be a positive integer. Optional size fields, when given, must be too.
# Checked at collection, so a bad config.json is one line, never a launched case.
_HF_OPTIONAL_SIZES = ("num_key_value_heads", "max_position_embeddings", "n_positions", "n_inner", "head_dim")
MAX_CONFIG_BYTES = 1 << 20  # a config.json is a few KB; never read a huge file whole


def hf_config_problem(data: Any, where: Path) -> str | None:
    """Why a config.json's content cannot be built and measured (None: it can)."""
    if not isinstance(data, dict) or not isinstance(data.get("model_type"), str):
        return f"{where} has no model_type"
    if data["model_type"] not in HF_MODEL_TYPES:
        return (
            f"{where}: model_type {data['model_type'][:40]!r} is not supported (supported: {', '.join(HF_MODEL_TYPES)})"
        )
    needed = ARCHITECTURES[data["model_type"]].size_fields
    for key in needed:
        if key not in data:
            return f"{where}: {key} is missing"
    for key in (*needed, *(k for k in _HF_OPTIONAL_SIZES if data.get(k) is not None)):
        value = data[key]
        if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 2**40:
            return f"{where}: {key} must be a positive integer, got {str(value)[:40]!r}"
    return None


def _weights_problem(folder: Path) -> str | None:
    """A model.safetensors that is not one (its header is 8 bytes of length, then JSON)."""
    path = folder / "model.safetensors"
    if not path.exists():
        return None
    try:
        with open(path, "rb") as fh:
            size = int.from_bytes(fh.read(8), "little")
            header = json.loads(fh.read(size)) if 0 < size <= MAX_CONFIG_BYTES * 64 else None
    except (OSError, ValueError):
        header = None
    if not isinstance(header, dict) or not any(k != "__metadata__" for k in header):
        return f"{path} is not a safetensors file (no tensor header)"
    return None


# The folder a sweep was started from: the runner passes it to the workers, whose own working
# directory is their case folder, so a relative `hf:PATH` means the same folder to both.
LAUNCH_CWD_ENV = "FSDP_BENCH_LAUNCH_CWD"


def hf_folder(model: str) -> Path:
    """The folder of `hf:PATH`: `~` expanded, a relative PATH taken from where the sweep started."""
    folder = Path(model[len(HF_PREFIX) :]).expanduser()
    origin = os.environ.get(LAUNCH_CWD_ENV)
    return Path(origin) / folder if origin and not folder.is_absolute() else folder


def hf_path_problem(model: str) -> str | None:
    """Why `hf:PATH` cannot be used (None: it has a usable config.json and, if any, weights
    that look like weights). Pure: reads JSON only."""
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in model):
        # the model is in the case id, the live line and the recommendation: each one line
        return f"{model!r}: the path holds a control character (a newline, a tab...); rename or link the folder"
    folder = hf_folder(model)
    if not folder.is_dir():
        return f"{model}: {folder} is not a folder"
    config = folder / "config.json"
    if not config.is_file():
        return f"{model}: {folder} has no config.json"
    try:
        if config.stat().st_size > MAX_CONFIG_BYTES:
            return f"{model}: {config} is over {MAX_CONFIG_BYTES} bytes; not a config"
        data = json.loads(config.read_text())
    except (OSError, ValueError, RecursionError) as exc:
        return f"{model}: {config} is not valid JSON ({str(exc)[:80]})"
    problem = hf_config_problem(data, config) or _weights_problem(folder)
    return f"{model}: {problem}" if problem else None


def flavor_for(model: str) -> ModelFlavor:
    """The named flavor, or one made on the fly for `hf:PATH` (its context read from config.json)."""
    if model in MODEL_FLAVORS:
        return MODEL_FLAVORS[model]
    folder = hf_folder(model)
    data = json.loads((folder / "config.json").read_text())
    context = data.get("max_position_embeddings") or data.get("n_positions")
    return ModelFlavor(
        model,
        "hf",
        {"path": str(folder.resolve()), "overrides": {}},
        context,
        f"local Hugging Face model folder {folder}",
    )


def _hf_row(flavor: ModelFlavor) -> Architecture:
    """A Hugging Face flavor's catalog row, read off its config (cached: the file is the same)."""
    key = (flavor.config.get("path"), flavor.config.get("config_file"), json.dumps(flavor.config.get("overrides", {})))
    if key not in _HF_ROWS:
        model_type = load_config_dict(flavor).get("model_type")
        if model_type not in HF_MODEL_TYPES:
            raise ValueError(
                f"{flavor.name}: Hugging Face model_type {str(model_type)[:40]!r} is not supported "
                f"(supported: {', '.join(HF_MODEL_TYPES)})"
            )
        _HF_ROWS[key] = ARCHITECTURES[model_type]
    return _HF_ROWS[key]


_HF_ROWS: dict[tuple[Any, ...], Architecture] = {}


def load_config_dict(flavor: ModelFlavor) -> dict[str, Any]:
    """A Hugging Face flavor's config as plain JSON: the shipped or local config.json with the
    flavor's overrides applied (private `_*` keys dropped)."""
    cfg = flavor.config
    path = Path(cfg["path"]) / "config.json" if "path" in cfg else CONFIG_DIR / cfg["config_file"]
    data = json.loads(path.read_text())
    data.update(cfg.get("overrides", {}))
    return {k: v for k, v in data.items() if not k.startswith("_")}
