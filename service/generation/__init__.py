"""The generation loop: prompt an OpenAI-compatible model with a task, judge its samples as a batch, and feed
each failure's diagnosis back for refinement turns. `run_generation` is what `kernel-judge generate` calls."""

from service.generation.chat import ChatClient, ChatError
from service.generation.feedback import feedback_message
from service.generation.loop import (
           Conversation,
           GenerationConfig,
           GenerationReport,
           TurnSummary,
           run_generation,
)

__all__ = ["ChatClient", "ChatError", "Conversation", "GenerationConfig", "GenerationReport", "TurnSummary",
           "feedback_message", "run_generation"]
