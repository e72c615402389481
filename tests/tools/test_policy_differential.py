"""The source policy against the preprocessor nvcc runs (the host g++, as nvcc runs it: -std=c++17): random sequences of
the pieces where the policy's scan and gcc have read text differently (comments, literals, raw strings and their
delimiters, splices, pp-numbers, digraphs, header names, directives), then an #include of a header that stops the
preprocessor at once. Whenever the policy passes such a file, gcc must not have read that header. A fixed seed: a
failure is a file to add to test_cuda_policy.py, with its fix."""
from __future__ import annotations

import random
import subprocess

import pytest

from ptxbench.tools.solution.cuda_policy import check_cuda_source
from ptxbench.tools.toolchain import which_host_compiler

PIECES = ["//", "/*", "*/", "*", "/", '"', "'", 'R"x(', ')x"', 'R"(', ')"', "\\\n", "\\ \n", "0'", "1'2", 'u8R"', 'LR"',
          "#if 0\n", "#endif\n", "#else\n", "#define X ", "#pragma unroll ", "\n", " ", "a", "e+", "0x1e", ".5", "$", "%:",
          "<:", "%>", "R", "\\", '""', "''", "'\\''", '"\\""', "##", "_Pragma", "(", ")", ",", '"a\\\n"', "/\\\n/",
          "/\\\n*", "*\\\n/", 'LR""\\', 'R"$', "1", "'", "e-", ".", "<", ">", "__has_include(<", 'R"x(\n', '\n)x"',
          "??/\n", "??=", "\f", "\v", "\t",
          # the openings of the misreadings found so far, for the pieces around them to vary
          'LR""\\""', "0'''0'", "1'e+'", "#if __has_include(<", "#define X R\"x(", "1\\u00b7'2'", "a\u00b7R\"x(", "1\u0301'"]
SAMPLES = 2500


def _reads_the_header(cxx: str, source: str) -> bool:
    res = subprocess.run([cxx, "-E", "-std=c++17", "-D__CUDACC__", "-fno-diagnostics-show-caret", "-x", "c++", "-",
                          "-o", "/dev/null"], input=source.encode(), capture_output=True, timeout=30)
    return b"PTXB_HEADER_READ" in res.stderr


@pytest.mark.skipif(which_host_compiler() is None, reason="no host C++ compiler (g++ or clang++) to read the files")
def test_the_policy_passes_no_file_whose_include_gcc_reads(tmp_path):
    cxx = which_host_compiler()
    header = tmp_path / "read.h"
    header.write_text("#error PTXB_HEADER_READ\n")
    rng = random.Random(20261206)
    passed = []
    for _ in range(SAMPLES):
        source = ("".join(rng.choice(PIECES) for _ in range(rng.randint(1, 7))) + f'\n#include "{header}"\n'
                  + "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 3))) + "\n// */\nint z;\n")
        if not check_cuda_source(source):
            passed.append(source)
    assert passed  # the sequences do hide the #include from the policy's reading, often: gcc must agree each time
    read = [s for s in passed if _reads_the_header(cxx, s)]
    assert not read, read[:3]
