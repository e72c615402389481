"""Chat-template markup the export must see in a model's text, for the tokenizers of the models users fine-tune."""
from __future__ import annotations

import pytest

from ptxbench.agent.export.recipes import CHAT_MARKUP


@pytest.mark.parametrize("markup", ["<tool_call>", "</tool_call>", "<tool_response>", "[TOOL_CALLS]", "<s>"])
def test_the_tool_call_tags_and_the_bos_token_are_chat_markup(markup):
    """Qwen2.5 / Qwen3's tokenizers hold <tool_call> and <tool_response> as added tokens (beside <think>, already
    refused), Mistral's [TOOL_CALLS], Llama 2 / Mistral's <s> (beside </s>): a kernel comment holding one trained the
    tool-call token, or a new sequence, inside a kernel, which a tool-call parser then reads as a call."""
    assert CHAT_MARKUP.search(f"// {markup}\n")


@pytest.mark.parametrize("code", ["std::vector<int> v;", "x = a<s && b>c;", "tile<s, 4>", "Tile<S> t;", "a[TOOL]"])
def test_kernel_code_is_no_chat_markup(code):
    assert not CHAT_MARKUP.search(code)
