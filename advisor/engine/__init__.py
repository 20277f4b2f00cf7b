"""Recommendation engine: knowledge tables, a calibrated cost model, a load model, sizing and the decision.

Public API: `decide(report, features=None) -> advisor.report.Recommendation`, `CostModel`, `whatif`.
"""
from advisor.engine.decide import decide
from advisor.engine.whatif import whatif

__all__ = ["decide", "whatif"]
