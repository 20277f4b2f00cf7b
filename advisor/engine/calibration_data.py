"""The GPU measurements the cost model is fitted to, read from the package's measurement-data folder.

Each row of `points.csv` is one `vllm bench serve` run (closed loop: `--max-concurrency C --request-rate inf`,
random prompts of `input_len` tokens, `--ignore-eos` outputs of `output_len`) against one server: a model
shape (random weights of that shape: `shapes/<shape>/config.json`), no speculation (k=0) or a proposer that
drafts exactly k tokens every step at fixed synthetic acceptance. README.md beside the table gives the
provenance (vLLM version, flags, date, GPU). tests/test_engine_cost.py checks the model against every row;
scripts/fit_cost.py refits the coefficients from them.
"""
from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path

from advisor.engine.cost import H200_CALIBRATION, Calibration, CostModel, StepLoad
from advisor.errors import InputError
from advisor.hardware import ModelSpec, _from_config_dict, resolve_gpu

DATA_DIR = Path(__file__).resolve().parent.parent / "data" / "measurements" / "h200_vllm0.26"
DEFAULT_POINTS = DATA_DIR / "points.csv"


def measured_shape(name: str, data_dir: Path = DATA_DIR) -> ModelSpec:
    """A shape the measurements ran (random weights), from its config.json in the data folder."""
    path = data_dir / "shapes" / name / "config.json"
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: no readable shape config ({exc})") from exc
    return _from_config_dict(name, config, str(path.relative_to(data_dir.parent.parent.parent)))


@dataclass(frozen=True)
class MeasuredPoint:
    """One measured (shape, k, input length, concurrency) point: medians of one bench run."""

    shape: str
    gpu: str
    k: int
    acceptance_length: float  # measured tokens per step per sequence (1 without speculation)
    input_len: int
    output_len: int
    concurrency: int
    num_prompts: int
    median_tpot_ms: float
    median_itl_ms: float
    median_ttft_ms: float
    output_throughput: float
    run: str
    holdout: bool

    def load(self) -> tuple[ModelSpec, StepLoad, float]:
        """The closed-loop step this point's bench produced, as `CostModel.closed_loop` models it."""
        model = measured_shape(self.shape)
        al = self.acceptance_length if self.k else 1.0
        load = StepLoad(
            batch=self.concurrency, tokens_per_seq=1.0 + self.k, mean_context=self.input_len + self.output_len / 2,
            prefill_tokens=(self.concurrency - 1) * al / self.output_len * self.input_len, speculative=self.k > 0,
        )
        return model, load, al

    def predict(self, calibration: Calibration = H200_CALIBRATION) -> float:
        """The model's median TPOT for this point (ms)."""
        model, load, al = self.load()
        return CostModel(model, resolve_gpu(self.gpu), calibration=calibration).step_ms(load) / al


def point_features(point: MeasuredPoint, calibration: Calibration = H200_CALIBRATION) -> tuple[dict[str, float], float]:
    """The point's step features (`CostModel.step_terms`) and 1 / tokens per step (TPOT = step / AL)."""
    model, load, al = point.load()
    return CostModel(model, resolve_gpu(point.gpu), calibration=calibration).step_terms(load), 1.0 / al


def load_points(path: Path = DEFAULT_POINTS) -> list[MeasuredPoint]:
    """Every row of the measurement table; InputError naming file, line and column on a bad row."""
    points = []
    with path.open(newline="") as handle:
        for line, row in enumerate(csv.DictReader(handle), start=2):
            try:
                points.append(MeasuredPoint(
                    shape=row["shape"], gpu=row["gpu"], k=int(row["k"]),
                    acceptance_length=float(row["acceptance_length"] or 1.0), input_len=int(row["input_len"]),
                    output_len=int(row["output_len"]), concurrency=int(row["concurrency"]),
                    num_prompts=int(row["num_prompts"]), median_tpot_ms=float(row["median_tpot_ms"]),
                    median_itl_ms=float(row["median_itl_ms"]), median_ttft_ms=float(row["median_ttft_ms"]),
                    output_throughput=float(row["output_throughput"]), run=row["run"], holdout=row["holdout"] == "1",
                ))
            except (KeyError, ValueError, TypeError) as exc:
                raise InputError(f"{path}:{line}: bad measurement row ({exc})") from exc
    return points
