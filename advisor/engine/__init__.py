"""Recommendation engine: knowledge tables, a calibrated cost model, a load model and the decision.

Public API: `decide(report, features, options) -> Recommendation`, `EngineOptions`, `CostModel`, `whatif`.
"""
from advisor.engine.decide import EngineOptions, Recommendation, decide
from advisor.engine.whatif import whatif

__all__ = ["EngineOptions", "Recommendation", "decide", "whatif"]
