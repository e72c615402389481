"""Sources the CUDA source policy refuses (tools/solution/cuda_policy.py), by the construct each spells, for the tests
that check a document names every refusal: the model's format (tests/prompts/test_prompt_claims_review.py) and the
people's page (tests/agent/test_doc_commands.py) each map these keys to their own wording."""
from __future__ import annotations

DEVICE = 'extern "C" __global__ void k() {{ {} }}\n'  # a kernel around one statement

REFUSED = {
    "std": "#include <cstdint>\n" + DEVICE.format("std::uint32_t x = 0; (void)x;"),
    "new": DEVICE.format("int* p = new int[4]; (void)p;"),
    "error": "#error no\n" + DEVICE.format(""),
    "warning": "#warning no\n" + DEVICE.format(""),
    "line": "#line 7\n" + DEVICE.format(""),
    "line_marker": '# 7 "host.cpp"\n' + DEVICE.format(""),
    "pragma": "#pragma nv_diag_suppress 177\n" + DEVICE.format(""),
    "_pragma": '_Pragma("nv_diag_suppress 177")\n' + DEVICE.format(""),
    "has_include": "#if __has_include(<cstdio>)\n#endif\n" + DEVICE.format(""),
    "include_next": "#include_next <cuda.h>\n" + DEVICE.format(""),
    "non_ascii": DEVICE.format("int \u00e9 = 0; (void)\u00e9;"),
    "ucn": DEVICE.format("int a\\u00b7b = 0;"),
    "carriage_return": DEVICE.format("int a = 0;\r(void)a;"),
    "nul": DEVICE.format("int a = 0;\x00(void)a;"),
}
