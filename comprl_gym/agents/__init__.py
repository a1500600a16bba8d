"""Agents: the :class:`Agent` protocol, a random agent, per-family experts and LLM agents."""

from comprl_gym.agents.base import Agent, RandomAgent, make_agent

__all__ = ["Agent", "RandomAgent", "make_agent"]
