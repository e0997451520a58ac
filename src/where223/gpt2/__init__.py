"""The case: GPT-2 under torch and transformers.

Runs are offline by default: the Hugging Face hub is never asked for anything (models are built from
configs, data is synthetic). A user who passes a real dataset opts in with HF_HUB_OFFLINE=0.
"""

import os

for _variable in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE", "HF_HUB_DISABLE_TELEMETRY"):
    os.environ.setdefault(_variable, "1")
