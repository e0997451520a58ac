"""A transformers model type built small from its config with random weights, and fed: the first stage of every
transformers cell (the architecture, class and remedies studies' and `where223 explain --model-type`).

1. `build` makes the model type's causal-LM head (else its base model) from `CONFIG_MAPPING[model_type]()` with
   random weights (seed 0), shrunk generically by config attribute names (`shrink_config`): widths divided by
   `WIDTH_DIVISOR` (heads kept, so head sizes stay whole), layers and stage depths cut, vocabularies capped,
   images made small, with `OVERRIDES` where that breaks an architecture's own invariants;
2. `model_inputs` feeds it what its forward accepts (token ids, pixel values, audio features or values,
   trajectories, decoder ids for encoder-decoders);
3. `build_and_feed` runs it once in fp32 at the first shrink level that builds and runs (`SHRINK_LEVELS`: when the
   shrunk model cannot be built or run, only depths and vocabularies are cut), recording each attempt.

torch and transformers are imported inside the functions: the stack's own releases, in its interpreter.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from where223.outcomes import Outcome
from where223.sweep.stages import describe_error

DEVICE = "cpu"
BATCH = 2
SEQ_LEN = 16
WIDTH_DIVISOR = 8
MAX_VOCAB = 1024
IMAGE_SIZE = 64
AUDIO_SAMPLES = 4000
AUDIO_FRAMES = 64



# Config attributes that are widths (divided by WIDTH_DIVISOR) or depths (cut to DEPTH); found by name.
WIDTH_ATTRIBUTES = frozenset(
    """hidden_size intermediate_size d_model encoder_ffn_dim decoder_ffn_dim d_ff n_embd n_inner d_inner embed_dim
    hidden_sizes d_kv embedding_size projection_dim ffn_dim dim hidden_dim d_embed emb_dim word_embed_proj_dim
    rotary_dim decoder_hidden_size decoder_intermediate_size feed_forward_size attention_head_size d_head
    d_latents pooler_hidden_size conv_dim tdnn_dim output_hidden_size true_hidden_size intra_bottleneck_size
    entity_emb_size xpath_unit_hidden_size fusion_hidden_size neck_hidden_sizes mask_feature_size
    fpn_feature_size classifier_proj_size codevector_dim proj_codevector_dim xvector_output_dim
    projection_intermediate_dim input_embedding_size output_embedding_size visual_embedding_dim
    attention_head_dim shape_embed_dim pronunciation_embed_dim auxiliary_channels coordinate_size
    shape_size mit_hidden_size mit_intermediate_size""".split()
)
DEPTH_ATTRIBUTES = frozenset(
    """num_hidden_layers n_layer num_layers encoder_layers decoder_layers num_decoder_layers n_layers
    num_encoder_layers decoder_num_hidden_layers num_self_attends_per_block l_layers x_layers r_layers
    num_sparse_encoder_layers num_sparse_decoder_layers depths depth block_sizes""".split()
)
VOCAB_ATTRIBUTES = frozenset(
    {"vocab_size", "decoder_vocab_size", "src_vocab_size", "tgt_vocab_size", "entity_vocab_size"}
)
DEPTH = 2
# Where generic shrinking breaks an architecture's own invariants.
OVERRIDES: dict[str, dict[str, Any]] = {
    "reformer": {  # training needs seq_len == prod(axial_pos_shape); the chunks must divide it
        "axial_pos_shape": (4, 4),
        "axial_pos_embds_dim": (16, 16),
        "lsh_attn_chunk_length": 4,
        "local_attn_chunk_length": 4,
        "attn_layers": ["local", "lsh"],
        "is_decoder": True,  # what its causal-LM head asserts
    },
    "transfo-xl": {"cutoffs": [256, 512], "tie_projs": [False, True, True]},  # one projection per cluster
    "whisper": {"max_source_positions": AUDIO_FRAMES // 2},
    "big_bird": {"attention_type": "original_full"},
    "bigbird_pegasus": {"attention_type": "original_full"},
    "switch_transformers": {"num_sparse_encoder_layers": 1, "num_sparse_decoder_layers": 1},
    "gpt_neox": {"num_attention_heads": 8},  # rotary_pct of a 12-wide head would be odd
    "esm": {"vocab_size": 33, "pad_token_id": 1},  # EsmConfig() leaves the vocabulary unset
    "cvt": {"depth": [1, 2, 3]},  # stage i indexes the drop-path rates of its depth by i
    "layoutlmv3": {"input_size": IMAGE_SIZE},  # the image the visual position embeddings are sized for
}
# Model types mapped to a class but without a config of their own: the config they are built from.
CONFIG_OF: dict[str, str] = {"decision_transformer_gpt2": "decision_transformer", "nllb": "m2m_100"}
# Shrinking from most to least: "small" (everything), "layers" (depths and vocabularies only). The config as is
# is never tried: some defaults are billions of parameters.
SHRINK_LEVELS: tuple[str, ...] = ("small", "layers")


def _divide(value: Any) -> Any:
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return max(1, value // WIDTH_DIVISOR) if value >= 2 * WIDTH_DIVISOR else value
    if isinstance(value, list):
        return [_divide(item) for item in value]
    return value


def _cut_depth(value: Any) -> Any:
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return min(value, DEPTH)
    if isinstance(value, list):
        return [min(item, 1) if isinstance(item, int) else item for item in value]
    return value


def _sub_configs(config: Any) -> list[Any]:
    from transformers import PretrainedConfig

    return [value for value in vars(config).values() if isinstance(value, PretrainedConfig)]


def shrink_config(config: Any, level: str) -> dict[str, Any]:
    """Shrink `config` in place (and its sub-configs) to `level`; returns the attributes changed."""
    changed: dict[str, Any] = {}
    attributes = vars(config)
    for name, value in list(attributes.items()):
        new = value
        if name in DEPTH_ATTRIBUTES:
            new = _cut_depth(value)
        elif level == "small" and name in WIDTH_ATTRIBUTES:
            new = _divide(value)
        elif name in VOCAB_ATTRIBUTES and isinstance(value, int):
            new = min(value, MAX_VOCAB)
        elif level == "small" and name == "image_size":
            new = [IMAGE_SIZE, IMAGE_SIZE] if isinstance(value, (list, tuple)) else min(value, IMAGE_SIZE)
        elif level == "small" and name == "num_frames" and isinstance(value, int):
            new = min(value, 4)
        if new != value:
            setattr(config, name, new)
            changed[name] = new
    vocab = getattr(config, "vocab_size", None)
    for name, value in list(attributes.items()):  # special token ids must stay inside the capped vocabulary
        if isinstance(vocab, int) and name.endswith("token_id") and isinstance(value, int) and value >= vocab:
            setattr(config, name, vocab - 1)
            changed[name] = vocab - 1
    for sub in _sub_configs(config):
        for name, value in shrink_config(sub, level).items():
            changed[f"{type(sub).__name__}.{name}"] = value
    return changed


def _text_vocab(config: Any) -> int:
    for candidate in (config, getattr(config, "text_config", None), getattr(config, "decoder", None)):
        vocab = getattr(candidate, "vocab_size", None)
        if isinstance(vocab, int) and vocab >= 1:
            return vocab
    return 100


def _attribute(config: Any, name: str, default: Any) -> Any:
    """`name` from the config or the first sub-config that has it."""
    for candidate in (config, *_sub_configs(config)):
        value = getattr(candidate, name, None)
        if value is not None:
            return value
    return default


def _pixel_values(torch: Any, config: Any, generator: Any) -> Any:
    size = _attribute(config, "image_size", IMAGE_SIZE)
    height, width = (size, size) if isinstance(size, int) else size
    channels = _attribute(config, "num_channels", 3)
    frames = _attribute(config, "num_frames", None)
    shape = (BATCH, frames, channels, height, width) if frames else (BATCH, channels, height, width)
    return torch.randn(*shape, generator=generator)


def _input_features(torch: Any, model_type: str, config: Any, generator: Any) -> Any:
    if model_type == "whisper":
        return torch.randn(BATCH, config.num_mel_bins, 2 * config.max_source_positions, generator=generator)
    features = getattr(config, "input_feat_per_channel", 80) * getattr(config, "input_channels", 1)
    return torch.randn(BATCH, AUDIO_FRAMES, features, generator=generator)


def _input_values(torch: Any, config: Any, generator: Any) -> Any:
    if hasattr(config, "num_mel_bins") and isinstance(getattr(config, "max_length", None), int):
        return torch.randn(BATCH, config.max_length, config.num_mel_bins, generator=generator)  # spectrograms
    return torch.randn(BATCH, AUDIO_SAMPLES, generator=generator)


def _token_ids(torch: Any, vocab: int, generator: Any, length: int = SEQ_LEN) -> Any:
    return torch.randint(min(4, vocab - 1), vocab, (BATCH, length), generator=generator)


def input_makers(torch: Any, model_type: str, config: Any) -> dict[str, Callable[[], Any]]:
    """A maker of one random tensor per forward parameter name this sweep knows how to feed."""
    generator = torch.Generator().manual_seed(0)
    vocab = _text_vocab(config)
    length = SEQ_LEN
    if model_type == "trajectory_transformer":
        length = config.transition_dim * 2
    state_dim = getattr(config, "state_dim", 1)
    act_dim = getattr(config, "act_dim", 1)
    return {
        "input_ids": lambda: _token_ids(torch, vocab, generator, length),
        "decoder_input_ids": lambda: _token_ids(torch, vocab, generator),
        "attention_mask": lambda: torch.ones(BATCH, length, dtype=torch.long),
        "pixel_values": lambda: _pixel_values(torch, config, generator),
        "input_features": lambda: _input_features(torch, model_type, config, generator),
        "input_values": lambda: _input_values(torch, config, generator),
        "visual_feats": lambda: torch.randn(BATCH, 4, config.visual_feat_dim, generator=generator),
        "visual_pos": lambda: torch.rand(BATCH, 4, config.visual_pos_dim, generator=generator),
        "inputs": lambda: torch.randn(BATCH, length, config.d_model, generator=generator),
        "trajectories": lambda: _token_ids(torch, vocab, generator, length),
        "states": lambda: torch.randn(BATCH, length, state_dim, generator=generator),
        "actions": lambda: torch.randn(BATCH, length, act_dim, generator=generator),
        "rewards": lambda: torch.randn(BATCH, length, 1, generator=generator),
        "returns_to_go": lambda: torch.randn(BATCH, length, 1, generator=generator),
        "timesteps": lambda: torch.arange(length).repeat(BATCH, 1),
        "input_ids_query": lambda: _token_ids(torch, vocab, generator, length),  # RetriBERT's two towers
        "attention_mask_query": lambda: torch.ones(BATCH, length, dtype=torch.long),
        "input_ids_doc": lambda: _token_ids(torch, vocab, generator, length),
        "attention_mask_doc": lambda: torch.ones(BATCH, length, dtype=torch.long),
    }


# Optional parameters fed whenever the forward has them: what makes the model whole (both towers, the mask).
ALWAYS_FED = ("input_ids", "attention_mask", "pixel_values", "visual_feats", "visual_pos")


def model_inputs(torch: Any, model: Any, model_type: str) -> dict[str, Any]:
    """The tensors to call `model` with, by forward parameter name; ValueError naming a parameter it cannot feed."""
    config = model.config
    makers = input_makers(torch, model_type, config)
    parameters = inspect.signature(model.forward).parameters
    wanted = [
        name
        for name, parameter in parameters.items()
        if parameter.kind in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY)
        and (
            parameter.default is parameter.empty
            or name in ALWAYS_FED
            or name == getattr(model, "main_input_name", None)
            or (name == "decoder_input_ids" and config.is_encoder_decoder)
        )
    ]
    if model_type == "decision_transformer":  # every trajectory input defaults to None, yet all are needed
        wanted = ["states", "actions", "rewards", "returns_to_go", "timesteps", "attention_mask"]
    missing = [name for name in wanted if name not in makers]
    if missing:
        raise ValueError(f"no input for required forward parameter(s) {', '.join(missing)}")
    return {name: makers[name]() for name in wanted}


def model_class(model_type: str) -> tuple[str, Any]:
    """('causal_lm' or 'base', the class) for a model type: the causal-LM head where one is mapped (the first class
    where a mapping names several)."""
    from transformers import CONFIG_MAPPING
    from transformers.models.auto import modeling_auto

    for head, names, mapping in (
        ("causal_lm", modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING),
        ("base", modeling_auto.MODEL_MAPPING_NAMES, modeling_auto.MODEL_MAPPING),
    ):
        if model_type in CONFIG_OF and model_type in names:  # no config of its own: the class by name
            import transformers

            return head, getattr(transformers, names[model_type])
        if model_type in names:
            cls = mapping[CONFIG_MAPPING[model_type]]
            return head, cls[0] if isinstance(cls, tuple) else cls
    raise KeyError(f"{model_type} is in neither MODEL_MAPPING_NAMES nor MODEL_FOR_CAUSAL_LM_MAPPING_NAMES")


def build(model_type: str, level: str, overrides: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
    """The model of `model_type` at shrink `level` with random weights (seed 0), in training mode, and its facts;
    `overrides` (config attribute -> value) are set last, over the shrinking and `OVERRIDES`."""
    import torch
    from transformers import CONFIG_MAPPING

    head, cls = model_class(model_type)
    if model_type == "vision-text-dual-encoder":  # its config must be given both towers
        from transformers import BertConfig, VisionTextDualEncoderConfig, ViTConfig

        config = VisionTextDualEncoderConfig.from_vision_text_configs(ViTConfig(), BertConfig())
    else:
        config = CONFIG_MAPPING[CONFIG_OF.get(model_type, model_type)]()
    changed = shrink_config(config, level)
    for name, value in {**OVERRIDES.get(model_type, {}), **(overrides or {})}.items():
        setattr(config, name, value)
        changed[name] = value
    if hasattr(config, "use_cache"):
        config.use_cache = False
    torch.manual_seed(0)
    model = cls(config).train()
    facts = {
        "head": head,
        "class": cls.__name__,
        "shrink": level,
        "config_changes": changed,
        "parameters": sum(p.numel() for p in model.parameters()),
    }
    return model, facts


def build_and_feed(
    record: dict[str, Any], timed: Callable[[str, Callable[[], Any]], Any], model_type: str, mode: str = "train",
    overrides: dict[str, Any] | None = None,
) -> tuple[Any, dict[str, Any] | None]:
    """Build `model_type` at the first shrink level that builds and runs once in fp32 (in `mode`), recording the
    attempts; (None, None) with the record's outcome and error set when none does."""
    import torch

    attempts: list[dict[str, Any]] = []
    model = inputs = None
    for level in SHRINK_LEVELS:
        current = "build"
        try:
            model, facts = timed(f"build-{level}", lambda level=level: build(model_type, level, overrides))
            model.train(mode == "train")
            current = "feed"
            inputs = model_inputs(torch, model, model_type)
            with torch.no_grad():
                timed(f"forward-{level}", lambda m=model, i=inputs: m(**i))
            record.update(facts)
            break
        except Exception as exc:  # noqa: BLE001 - a model that cannot be built or fed is a result
            attempts.append({"shrink": level, **describe_error(exc, current)})
            model = inputs = None
            if isinstance(exc, (KeyError, ImportError)) or (current == "feed" and "no input for" in str(exc)):
                break  # no shrink level changes a missing class or an input this sweep cannot make
    if attempts:
        record["attempts"] = attempts
    if model is None or inputs is None:
        last = attempts[-1]
        record["outcome"] = Outcome.NOT_BUILT if last["stage"] == "build" else Outcome.NOT_FED
        record["built"] = last["stage"] != "build"
        record["error"] = last
        return None, None
    return model, inputs
