"""Pure workload measurements: numpy arrays, token ids and timestamps in, small frozen results out.

No I/O, no printing, no tokenizers here. Every result is a frozen dataclass whose `to_dict()` returns
JSON-ready plain types (rounded floats, None instead of NaN). Formulas: docs/metrics.md.
"""
