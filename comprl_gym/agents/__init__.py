"""Agents: the :class:`Agent` protocol, a random agent, per-family experts and LLM agents."""

from comprl_gym.agents.base import EXPERTS, Agent, RandomAgent, make_agent

__all__ = ["EXPERTS", "Agent", "RandomAgent", "make_agent"]
