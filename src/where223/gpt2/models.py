"""GPT-2 models built from configs (random weights, never downloaded) and deterministic synthetic data."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from transformers import GPT2Config, GPT2ForSequenceClassification

PRESETS: dict[str, dict[str, Any]] = {
    # Small enough for tests and the default run: two layers, as in the seed the failure is in h.0.
    "tiny": {"n_layer": 2, "n_head": 2, "n_embd": 32, "n_positions": 64, "vocab_size": 256},
    # The 124M architecture of the seed's `gpt2`, with random weights.
    "gpt2": {},
}
PAD_TOKEN_ID = 0
NUM_LABELS = 2


def make_config(preset: str, dropout: bool = True) -> GPT2Config:
    """The GPT2Config of a preset; `dropout=False` zeroes every dropout (ORT draws other random numbers)."""
    if preset not in PRESETS:
        raise ValueError(f"model preset {preset!r} is unknown; allowed: {sorted(PRESETS)}")
    overrides = dict(PRESETS[preset])
    if not dropout:
        overrides.update(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, summary_first_dropout=0.0)
    return GPT2Config(num_labels=NUM_LABELS, pad_token_id=PAD_TOKEN_ID, use_cache=False, **overrides)


def build_model(preset: str, seed: int, dropout: bool = True) -> GPT2ForSequenceClassification:
    """GPT-2 for sequence classification (the seed trains it on SST-2), initialised from `seed`."""
    torch.manual_seed(seed)
    return GPT2ForSequenceClassification(make_config(preset, dropout=dropout))


@dataclass(frozen=True)
class SyntheticSentiment(torch.utils.data.Dataset):
    """A deterministic stand-in for SST-2: token ids with a learnable binary label.

    Sentences are random token ids (no tokenizer needed); the label says whether the upper half of the
    vocabulary outnumbers the lower half, so a model can learn it and losses fall.
    """

    size: int
    seq_len: int
    vocab_size: int
    seed: int

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        if not 0 <= index < self.size:
            raise IndexError(index)
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
        input_ids = torch.randint(1, self.vocab_size, (self.seq_len,), generator=generator)
        label = int((input_ids >= self.vocab_size // 2).sum() * 2 > self.seq_len)
        return {
            "input_ids": input_ids,
            "attention_mask": torch.ones(self.seq_len, dtype=torch.long),
            "labels": torch.tensor(label),
        }


def load_dataset(name: str, size: int, seq_len: int, vocab_size: int, seed: int) -> torch.utils.data.Dataset:
    """The training data: `synthetic` (offline, default) or a GLUE task name such as `sst2` (needs the hub)."""
    if name == "synthetic":
        return SyntheticSentiment(size=size, seq_len=seq_len, vocab_size=vocab_size, seed=seed)
    return _load_glue(name, size, seq_len)


def _load_glue(task: str, size: int, seq_len: int) -> torch.utils.data.Dataset:
    """Tokenise the first `size` training sentences of a GLUE task (online users only)."""
    try:
        import datasets
        from transformers import GPT2TokenizerFast
    except ImportError as error:
        raise RuntimeError(f"dataset={task!r} needs the `datasets` package: pip install datasets") from error
    try:
        raw = datasets.load_dataset("glue", task, split=f"train[:{size}]")
        tokenizer = GPT2TokenizerFast.from_pretrained("gpt2")
    except Exception as error:  # hub unreachable, unknown task, ...
        raise RuntimeError(
            f"dataset={task!r} could not be loaded from the Hugging Face hub ({error}); "
            "use dataset='synthetic' offline"
        ) from error
    tokenizer.pad_token = tokenizer.eos_token
    encoded = tokenizer(raw["sentence"], padding="max_length", truncation=True, max_length=seq_len)
    encoded["labels"] = raw["label"]
    return datasets.Dataset.from_dict(dict(encoded)).with_format("torch")


def example_batch(dataset: torch.utils.data.Dataset, batch_size: int) -> dict[str, torch.Tensor]:
    """The first `batch_size` examples stacked into one batch."""
    rows = [dataset[i] for i in range(batch_size)]
    return {key: torch.stack([row[key] for row in rows]) for key in rows[0]}


def first_batch(name: str, batch_size: int, seq_len: int, vocab_size: int, seed: int) -> dict[str, torch.Tensor]:
    """The first `batch_size` examples of dataset `name` as one batch (the example batch of every run)."""
    return example_batch(load_dataset(name, batch_size, seq_len, vocab_size, seed), batch_size)


# Head size 20, whose square root bfloat16 and float16 cannot hold; weights large enough that the scores,
# and so a change in their last bit, survive the softmax (GPT-2's 0.02 leaves them near zero).
PROBE_CONFIG: dict[str, float] = {"n_layer": 1, "n_head": 2, "n_embd": 40, "initializer_range": 0.5}


def probe_model(seed: int, device: str) -> tuple[GPT2ForSequenceClassification, dict[str, torch.Tensor]]:
    """The probe (PROBE_CONFIG, weights from `seed`) in eval mode on `device`, and its batch of 2 x 8 synthetic
    tokens: the model on which a fix's bitwise checks and the variant study's numerics look at the scale."""
    torch.manual_seed(seed)
    config = make_config("tiny", dropout=False)
    config.update(PROBE_CONFIG)
    probe = GPT2ForSequenceClassification(config).to(device).eval()
    batch = first_batch("synthetic", 2, 8, config.vocab_size, seed)
    return probe, {key: value.to(device) for key, value in batch.items()}
