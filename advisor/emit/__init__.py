"""Renderers of the report document: terminal view, checklist, and the emitted configs (serve command,
--config YAML, LLM kwargs, JSON). They read the document alone and decide nothing."""
from advisor.emit.checklist import render_checklist
from advisor.emit.configs import config_json, config_yaml, llm_kwargs, render_configs, serve_command
from advisor.emit.terminal import render_terminal

__all__ = ["config_json", "config_yaml", "llm_kwargs", "render_checklist", "render_configs", "render_terminal",
           "serve_command"]
