"""Graceful decommission on the node (YARN-914): drain requests, the controller in the loop, its notices."""

from agent.decommission.controller import DrainController, request_drain, request_recommission

__all__ = ["DrainController", "request_drain", "request_recommission"]
