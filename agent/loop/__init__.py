"""The optimisation loop: the LangGraph graph (graph.py) over the checkpointed state (state.py),
its stop rules, context policy, reply extraction, feedback, task prompts and tools-mode tools;
optimize.py runs one trajectory."""
