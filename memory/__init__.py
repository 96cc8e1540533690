"""botweave.memory: what agents keep about each person, across chats and linked platforms,
and the commands and gateway methods that let people see and delete it."""

from botweave.memory.commands import MemoryCommands, MemoryMethods
from botweave.memory.config import AgentMemory, MemoryConfig
from botweave.memory.keeper import MemoryKeeper
from botweave.memory.links import Links
from botweave.memory.tools import memory_tools

__all__ = [
    "AgentMemory", "Links", "MemoryCommands", "MemoryConfig", "MemoryKeeper", "MemoryMethods",
    "memory_tools",
]
