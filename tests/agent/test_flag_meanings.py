"""Every timing flag the record can carry (Timing.flags' description names them) has its meaning in the turn
feedback: a flag shown bare tells the model nothing about what to change (invalid_durations and profile_slower were
added without one)."""
from __future__ import annotations

import re

from ptxbench.agent.loop.feedback import FLAG_MEANINGS
from ptxbench.tools.results import Timing


def test_every_flag_the_record_names_has_a_meaning_in_the_feedback():
    named = re.findall(r"'([a-z_]+)'", Timing.model_fields["flags"].description)
    assert {"invalid_durations", "profile_slower", "reduced_iterations"} <= set(named)
    assert [flag for flag in named if flag not in FLAG_MEANINGS] == []


def test_reduced_iterations_is_not_said_to_be_the_time_limits_alone():
    """plan_iterations flags every slow candidate's few calls as reduced too, not only a cut by the time limit."""
    assert "slow candidate" in FLAG_MEANINGS["reduced_iterations"]
