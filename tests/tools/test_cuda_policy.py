"""The source policy: `cuda` solutions are device-only, `ptx` solutions are whole modules."""
from __future__ import annotations

import pytest

from ptxbench.tools.solution.cuda_policy import ALLOWED_INCLUDES, check_cuda_source, check_ptx_source
from waits import cpu_timed

GOOD = r'''
#include <cuda.h>
#include <cuda_bf16.h>
#include "ptxbench/wgmma.cuh"
#define DEVICE __device__ __forceinline__
#define TWICE(x) ((x) * 2)
namespace detail {
template <int N> DEVICE int times(int x) { return x * N; }
struct Acc {
  float v[4];
  __device__ void zero() { for (int i = 0; i < 4; ++i) v[i] = 0.f; }
};
}  // namespace detail
__constant__ float kScale = 1.0f;
__device__ const int kTable[2] = {1, 2};
extern "C" {
__global__ void __launch_bounds__(128, 1) k1(const __grid_constant__ CUtensorMap tm, float* out, int n) {
  // printf("in a comment") and cudaMalloc( in a comment are fine
  asm volatile("mov.u32 %0, %%tid.x; // cuLaunchKernel( main( inside a string" : "=r"(n));
#pragma unroll
  for (int i = 0; i < 4; ++i) { if (i < n) out[i] = detail::times<2>(TWICE(i)) * kScale; }
}
}
extern "C" __global__ void k2(float* out) { auto f = [](int a) { return a + 1; }; out[0] = f(1); }
'''


def test_device_only_file_passes():
    assert check_cuda_source(GOOD) == []


@pytest.mark.parametrize("include", ALLOWED_INCLUDES)
def test_allowed_includes(include):
    assert check_cuda_source(f"#include {include}\n") == []


@pytest.mark.parametrize("line", ["#include <cstdio>", "#include <cuda_runtime.h>", '#include "ptxbench/other.cuh"',
                                  "#include </etc/passwd>", "# include <cublas_v2.h>", "#include_next <cuda.h>",
                                  '#import "x.h"'])
def test_refused_includes(line):
    issues = check_cuda_source(f"// header\n{line}\n")
    assert len(issues) == 1 and issues[0].line == 2 and "not allowed" in issues[0].message
    assert "<cuda.h>" in issues[0].message  # the allow list is spelled out


@pytest.mark.parametrize("code, line, words", [
    ("int main() { return 0; }", 2, ["main()"]),
    ("__host__ __device__ int f(int x) { return x; }", 2, ["__host__"]),
    ("extern \"C\" __global__ void k() {}\nvoid launch() { k<<<1, 1>>>(); }", 3, ["<<<"]),
    ("__device__ void f() { cudaMalloc(0, 0); }", 2, ["CUDA runtime API (cudaMalloc)"]),
    ("__device__ void f() { cudaDeviceSynchronize(); }", 2, ["cudaDeviceSynchronize"]),
    ("__device__ void f() { cuTensorMapEncodeTiled(0); }", 2, ["CUDA driver API (cuTensorMapEncodeTiled)"]),
    ("__device__ void f() { printf(\"%d\", 1); }", 2, ["printf()"]),
    ("__device__ void f() { void* p = malloc(16); free(p); }", 2, ["malloc()"]),
    ("__device__ void f() { int* p = new int[4]; }", 2, ["operator new"]),
    ("__device__ void f(int* p) { delete[] p; }", 2, ["operator delete"]),
    ("__device__ void f() { std::sort(0, 0); }", 2, ["std::"]),
    ("int helper(int x) { return x; }", 2, ["helper()", "host code", "__device__"]),
    ("static inline float g(float x)\n{\n  return x;\n}", 2, ["g()", "host code"]),
    ("struct S { int get() const { return 1; } };", 2, ["get()", "host code"]),
    ("namespace n { int h() { return 1; } }", 2, ["h()", "host code"]),
    ("#pragma comment(lib, \"cuda\")", 2, ["#pragma comment"]),
    ("#pragma GCC optimize(\"O0\")", 2, ["#pragma GCC"]),
])
def test_refusals_name_line_and_reason(code, line, words):
    issues = check_cuda_source("// a solution\n" + code + "\n")
    assert any(i.line == line and all(w in i.message for w in words) for i in issues), [str(i) for i in issues]


@pytest.mark.parametrize("line, words", [
    ('#line 1 "/proc/1/environ"', ["#line", "line markers"]),
    ('# 1 "/etc/passwd"', ["#line", "line markers"]),
    ('%:line 7', ["#line"]),
    ('#li\\\nne 1 "/etc/passwd"', ["#line"]),  # spliced by the compiler before it reads the directive
    ("#error stop", ["#error", "static_assert"]),
    ("#warning look", ["#warning"]),
    ('#ident "x"', ["#ident", "allowed directives"]),
])
def test_directives_that_rename_the_file_or_print_a_line_are_refused(line, words):
    # `#line N "host file"` + `#error`: the host compiler prints that file's line N under the message
    issues = check_cuda_source("// header\n" + line + "\n")
    assert len(issues) == 1 and issues[0].line == 2 and all(w in issues[0].message for w in words), issues


def test_a_directive_behind_a_digit_separator_is_still_seen():
    # 1'2 is a number: the `'` after it opens a character literal to the end of the line, not the `/*` a scanner
    # reading `'2'` as a literal would take for a comment hiding the lines below
    issues = check_cuda_source("int a = 1'2'/*\n#line 1 \"/etc/passwd\"\n#error x\n*/\n")
    assert [i.line for i in issues] == [2, 3], issues


def test_allowed_pragmas_and_cuda_types():
    code = ("#pragma once\n#pragma unroll 4\n#pragma nounroll\n"
            "extern \"C\" __global__ void k(const __grid_constant__ CUtensorMap m, cudaError_t* e, CUdeviceptr p) {}\n")
    assert check_cuda_source(code) == []


@pytest.mark.parametrize("code", [
    "int x;\r#include <stdio.h>\n",  # a lone carriage return ends a line for the compiler, not for a \n split
    '// a note\r#line 1 "/etc/passwd"\n',  # nor does it end the // comment the scan blanked
    '#\x00include "/etc/hostname"\n',  # a NUL is white space to the compiler: an #include the scan did not see
])
def test_a_lone_carriage_return_or_a_nul_cannot_hide_a_directive(code):
    issues = check_cuda_source(code)
    assert issues and issues[0].line == 1 and ("carriage return" in issues[0].message or "NUL" in issues[0].message), \
        [str(i) for i in issues]
    assert check_cuda_source('#include <cuda.h>\r\n__device__ int x;\r\n') == []  # CRLF line endings stay fine



@pytest.mark.parametrize("directive", ['#include "/etc/hostname"', '#pragma GCC dependency "/etc/hostname"',
                                       '#line 1 "/etc/passwd"', "#error x"])
def test_a_byte_order_mark_cannot_hide_the_first_lines_directive(directive):
    """The compiler skips a UTF-8 byte-order mark at the start of the file, so the line after it is a directive;
    `\\s` is no match for U+FEFF, and the scan read the line as code: every directive of the allow list passed there,
    and in the `limits` jail `#pragma GCC dependency` told whether a host file exists."""
    issues = check_cuda_source("\ufeff" + directive + "\n__device__ int x;\n")
    assert [i.line for i in issues] == [1], [str(i) for i in issues]
    assert check_cuda_source("\ufeff#include <cuda.h>\n__device__ int x;\n") == []

@pytest.mark.parametrize("code", [
    '_Pragma("GCC dependency \\"/etc/passwd\\"")',  # the #pragma refused above, as an operator
    '_Pragma("GCC error \\"x\\"")',
    '#define S(x) #x\n#define P(x) _Pragma(S(x))',  # the pragma's text is not known before expansion
    "_Pragma ( L\"comment(lib)\" )",
])
def test_the_pragma_operator_goes_through_the_pragma_allow_list(code):
    issues = check_cuda_source(code + "\n")
    assert issues and all("_Pragma" in i.message for i in issues), [str(i) for i in issues]


def test_the_pragma_operator_with_an_allowed_pragma_passes():
    code = ('#define UNROLL _Pragma("unroll")\n'
            'extern "C" __global__ void k(int* p) { _Pragma("unroll 4") for (int i = 0; i < 8; ++i) p[i] = i; UNROLL '
            'for (int i = 0; i < 8; ++i) p[i] += i; }\n')
    assert check_cuda_source(code) == []


def test_macro_that_hides_host_code_is_still_host_code():
    issues = check_cuda_source("#define INLINE inline\nINLINE int f() { return 1; }\n")
    assert [i.line for i in issues] == [2]


def test_every_issue_is_reported_in_line_order():
    code = "#include <cstdio>\nint main() {\n  printf(\"x\");\n  cudaFree(0);\n}\n"
    lines = [i.line for i in check_cuda_source(code)]
    assert lines == sorted(lines) and {1, 2, 3, 4} <= set(lines)


PTX = ".version 8.0\n.target sm_90a\n.address_size 64\n.visible .entry k()\n{\n\tret;\n}\n"


def test_ptx_module_sanity():
    assert check_ptx_source(PTX) == []
    assert "no .version" in check_ptx_source(PTX.replace(".version 8.0\n", ""))[0].message
    assert "no .target" in check_ptx_source(PTX.replace(".target sm_90a\n", ""))[0].message
    issue = check_ptx_source(PTX.replace("sm_90a", "sm_100a"))[0]
    assert issue.line == 2 and "expected .target sm_90a" in issue.message
    assert check_ptx_source(PTX.replace("sm_90a", "sm_100a"), arch="sm_100a") == []
    assert check_ptx_source(PTX.replace("sm_90a", "sm_90")) == []  # the compile step explains sm_90 vs sm_90a
    cuda = check_ptx_source(PTX + '\nextern "C" __global__ void k() {}\n')
    assert cuda and "language = \"cuda\"" in cuda[0].message


def test_ptx_checks_ignore_comments():
    commented = "// .version 8.0\n/* .target sm_90a */\n.visible .entry k()\n{\n\tret;\n}\n"
    assert len(check_ptx_source(commented)) == 2


def test_a_macro_that_expands_to_copies_of_itself_costs_no_memory():
    # four rounds of substitution wrote X's 200**4 copies out (3 GB, 13 s); each macro's answer is now found once
    bomb = "#define X " + " ".join(["X"] * 200) + "\nX f() { }\n"
    issues, took = cpu_timed(check_cuda_source, bomb)
    assert took < 2 and [(i.line, "f() is host code" in i.message) for i in issues] == [(2, True)]
    chain = "#define A B\n#define B C\n#define C __device__\nA int f() { return 1; }\n"
    assert check_cuda_source(chain) == []  # macros of macros still count
    assert check_cuda_source("#define __device__\n__device__ int f() { return 1; }\n")  # a name defined away


@pytest.mark.parametrize("code", [
    "struct{" * 55_000,  # every brace asked whether any open scope is code
    "void f(" + "a" * 380_000 + ") {}",  # the function's name searched from every letter of a long one
    "namespace " * 38_000 + "( {",  # `namespace [names]$` tried from every `namespace`
])
def test_long_heads_and_deep_scopes_are_read_in_linear_time(code):
    _, took = cpu_timed(check_cuda_source, code)
    assert took < 2, took


def test_blank_lines_before_a_missing_version_are_read_in_linear_time():
    # `^\s*` crosses lines: from every line start of a blank run it read the rest of the run
    issues, took = cpu_timed(check_ptx_source, "\n" * 380_000)
    assert took < 2 and len(issues) == 2, took
    assert check_ptx_source("\n\n" + PTX.replace("sm_90a", "sm_100a"))[0].line == 4  # the .target's own line


HIDES = [
    "// a note \\\n/*\n",  # the // comment goes on past the backslash-newline, so `/*` opens nothing
    "// a note \\   \n/*\n",  # white space after the backslash splices too
    "/* a note *\\\n/\n",  # `*\` + newline + `/` is `*/`: the comment ends before the directive
    'const char* s = R""(" /* )"";\n',  # `"` may be a raw string's delimiter: no comment opens in it
    '#define UNUSED "x"R"/* "\n',  # after a literal, R is its ud-suffix and `"/* "` a plain string, not a raw one
    "#define UNUSED \\// a backslash before a comment joins no lines (comments go after the splicing)\n",
    '#define UNUSED 0x1e+R"/* "\n',  # 0x1e+R is one pp-number (e+ is part of it): then a plain string
    '#define UNUSED a$R"/* "\n',  # a$R is one identifier for gcc
    '#define UNUSED \u00e9R"/* "\n',  # so is \u00e9R
    '#define UNUSED 1.e-R"/* "\n',  # 1.e-R too
    "#define UNUSED a.5'L' /*\n",  # `.5'L` is a number after an identifier too, then `' /*` a char literal
    "#define UNUSED 1'\u00e9 /*\n",  # a digit separator only before an ASCII digit, letter or _: `'\u00e9 /*` is a char literal
    "#define UNUSED 1'e+'a /*\n",  # no sign after an e that follows a separator: `1'e`, `+`, then a char literal
    "#define UNUSED 0x1'p-'a /*\n",
]

# gcc takes a run of digit separators into a number when a digit or letter follows the run (and then refuses the file:
# adjacent digit separators), so `0'''0` is one pp-number and the `'` after it opens a char literal holding the `/*`;
# the scan read `0`, `''`, `'0'`, `"a"` and a comment, and passed the #include below (found by a differential fuzz
# against g++ -E, which read it)
SEPARATOR_RUNS = ["#define UNUSED 0'''0'\"a\" /*\n", "int x = 1'''2'\"\" /*\n"]

@pytest.mark.parametrize("hide", HIDES + SEPARATOR_RUNS)
def test_a_directive_the_compiler_reads_is_never_read_as_comment_text(hide):
    """The compiler joins backslash-newlines before it reads comments, and takes `"` in a raw string's delimiter; a
    scan that blanked comments first, or refused that delimiter, read the directive after these as comment text and
    passed an include of any host header in the compiler's view."""
    code = hide + '#include "/usr/include/stdio.h"\n/* */\nextern "C" __global__ void k(int* p) { p[0] = EOF; }\n'
    issues = check_cuda_source(code)
    line = hide.count("\n") + 1
    included = [i for i in issues if i.line == line]
    assert included and "/usr/include/stdio.h" in included[0].message, [str(i) for i in issues]
    assert all(i.line == line or "non-ASCII" in i.message for i in issues), [str(i) for i in issues]  # `\u00e9R`
    assert check_cuda_source('#define TWO(x) \\\n  ((x) * 2)  // a macro on two lines\n'
                             'extern "C" __global__ void k(int* p) {\n  p[0] = TWO(1);\n}\n') == []


@pytest.mark.parametrize("hide", HIDES)
def test_nvcc_reads_the_line_after_each_hiding_place(hide):
    """What the test above protects: for nvcc the line after each of these is code (its #define takes effect)."""
    from ptxbench.tools.compile import compile_source

    code = hide + ('#define SEEN 1\n// */\n#ifndef SEEN\n#error the line was a comment\n#endif\n'
                   'extern "C" __global__ void k(int* p) { p[0] = SEEN; }\n')
    result = compile_source(code, "cuda", use_cache=False)
    assert result.status == "ok", result.errors


# gcc refuses each of these raw strings (an error), then reads on in a way of its own: after `LR""\"` it takes `"` to
# end the bad literal and the next `"` to open a plain string, so the `/*` after it opens no comment. The scan took
# `""` for a whole string and that `/*` for a comment, and passed the #include below it, which nvcc read. The others
# hid nothing from this gcc, but the scan must not rest on each compiler's recovery: a malformed one is refused.
MALFORMED_RAW = [
    '$x,LR""\\""/\\\n*\n',  # found by a differential fuzz against g++ -E: `\` in the delimiter
    'const char* s = R"$(x)$" /* ";\n',  # `$`, `@` and a backquote are no delimiter characters for gcc 12
    'const char* s = R"\u00e9(x)\u00e9" /* ";\n',  # nor is a non-ASCII letter
    'const char* s = R"0123456789abcdefg(x)0123456789abcdefg" /* ";\n',  # past 16 characters
    'const char* s = R"ab\ncd(x)" /* ";\n',  # a line break in the delimiter
    # in a directive a raw string ends with its line ("unterminated raw string"): the next line is code for gcc, where
    # `)x"` leaves ` /*` in an unterminated plain string, so the #include below was read by nvcc and passed the scan
    '#define X R"x(\n)x" /*\n',
    '#pragma unroll R"x(\n)x" /*\n',
    '/*\n*/ #define X R"x(\n)x" /*\n',  # a comment before its `#` leaves it a directive
    '#define X /*\n*/ R"x(\n)x" /*\n',  # and one inside it does not end it
    '#define X R"x()x" R"y(\n)y" /*\n',
]


def test_a_raw_string_after_a_comment_that_ends_no_line_is_no_directive():
    # `int y; /*` + newline + `*/ #define`: for gcc the `#` is not the first token of a line, so no directive, and the
    # raw string may span lines as in code (the policy refuses that line's `#define` all the same)
    code = 'const char* s = R"x(\n)x" /*\n */\nextern "C" __global__ void k(int* p) { p[0] = 1; }\n'
    assert check_cuda_source(code) == []
    assert not any("raw string" in i.message for i in check_cuda_source('int y; /*\n*/ #define X R"x(\n)x"\n'))


def _issues_of_an_include_after(hide: str) -> list:
    """The policy's issues with a file that puts `hide` before an #include of a system header and a `*/`: a scan that
    took `hide` for the opening of a comment blanks the #include and passes it."""
    return check_cuda_source(hide + '#include "/usr/include/stdio.h"\n// */\n'
                             'extern "C" __global__ void k(int* p) { p[0] = 1; }\n')


@pytest.mark.parametrize("raw", MALFORMED_RAW)
def test_a_malformed_raw_string_is_refused(raw):
    issues = _issues_of_an_include_after(raw)
    line = raw[:raw.index('R"')].count("\n") + 1
    assert any("raw string" in i.message and i.line == line for i in issues), [str(i) for i in issues]


def test_well_formed_raw_strings_pass():
    code = ('const char* a = R"(x)";\nconst char* b = R"0123456789abcdef(y)0123456789abcdef";\n'
            'const char* c = u8R"-_{}[]#<>%:;.?*(z)-_{}[]#<>%:;.?*";\n'
            '__device__ const wchar_t* d = LR"+/^&|~!=,\'"(w)+/^&|~!=,\'"";\n'
            'extern "C" __global__ void k(int* p) { p[0] = 1; }\n')
    assert check_cuda_source(code) == []
    from ptxbench.tools.compile import compile_source  # the delimiters the scan takes are the compiler's

    r = compile_source(code, "cuda", use_cache=False)
    # nvcc took every delimiter; the one refusal is the module data rule's: `d` keeps a string's address
    assert [e.message.startswith("the initialiser of module variable d names") for e in r.errors] == [True], r.errors


# In `__has_include(<...>)` gcc reads `<...>` as a header name, in which `/*` opens no comment; the scan took it for one
# and blanked every line up to the next `*/`, so an #include of any header in the compiler's view passed the policy.
HEADER_NAME_HIDES = [
    "#if __has_include(</*>)\n#endif\n",
    "#if 0\n#elif __has_include_next(</*>)\n#endif\n",
]


@pytest.mark.parametrize("hide", HEADER_NAME_HIDES)
def test_has_include_is_refused(hide):
    issues = _issues_of_an_include_after(hide)
    assert any("__has_include" in i.message for i in issues), [str(i) for i in issues]


@pytest.mark.parametrize("hide", HEADER_NAME_HIDES)
def test_nvcc_reads_the_lines_after_a_header_name_holding_a_comment_opener(hide):
    test_nvcc_reads_the_line_after_each_hiding_place(hide)


# gcc takes many non-ASCII characters that Python's \\w does not (U+00B7 middle dot, U+0301 combining acute...) into an
# identifier or a pp-number, and refuses some that \\w takes (U+2E2F): `a\u00b7R"x(` is an identifier and a plain
# string for gcc, a raw string for the scan, which then read `)x" /*` as the end of it and a comment, and passed the
# #include below (nvcc read it); so did `1\u00b7'2'/*`, a pp-number then a char literal for gcc.
IDENTIFIER_HIDES = [
    'int a\u00b7R"x(\n)x" /*\n',
    '\u00b7R"x(\n)x" /*\n',
    'int a\u0301R"x(\n)x" /*\n',
    "int x = 1\u00b7'2'/*\n",
    "int x = 1\u0301'2'/*\n",
    # the same in ASCII: gcc takes a universal character name into a pp-number, valid in a name or not
    "int x = 1\\u00b7'2'/*\n",
    "int x = 1\\U000000B7'2'/*\n",
    "int x = 1\\u2e2f'2'/*\n",
]


@pytest.mark.parametrize("hide", IDENTIFIER_HIDES)
def test_a_non_ascii_character_in_code_is_refused(hide):
    issues = _issues_of_an_include_after(hide)
    assert any("ASCII" in i.message and i.line == 1 for i in issues), [str(i) for i in issues]


def test_non_ascii_text_in_comments_and_strings_passes():
    code = ('// tile = 128 \u00d7 64, \u2264 227 KB \u00b7 caf\u00e9\n/* \u00b5s */\n__device__ const char* s = "\u00e9\u00b7";\n'
            "__device__ const char c = '\u00e9';\n"
            'extern "C" __global__ void k(int* p) { p[0] = 1; }\n')
    assert check_cuda_source(code) == []


@pytest.mark.parametrize("code", ['#/*\n*/include <stdio.h>\n', '%:/*\n*/line 1 "/usr/include/stdio.h"\n',
                                  '  #  /* a note\n  */  error hidden\n'])
def test_a_directive_continued_past_a_comment_is_refused(code):
    """The compiler reads a comment as one space before it reads directives, so `#/*` + `*/include <stdio.h>` is an
    include; read line by line with the comment blanked, the `#` stood alone and the include was code."""
    issues = check_cuda_source(code + 'extern "C" __global__ void k(int* p) { p[0] = 1; }\n')
    assert any(i.line == 1 and "a `#` with nothing after it" in i.message for i in issues), [str(i) for i in issues]


def test_token_pasting_is_refused_and_a_string_of_hashes_is_not():
    """`CAT(_Pra, gma)(...)` is `_Pragma(...)` to the compiler, a name the pragma allow list never saw."""
    pasted = '#define CAT(a, b) a##b\nCAT(_Pra, gma)("GCC warning \\"ran\\"")\nextern "C" __global__ void k() {}\n'
    (issue,) = [i for i in check_cuda_source(pasted) if "token pasting" in i.message]
    assert issue.line == 1
    assert check_cuda_source('__device__ const char s[] = "##";\nextern "C" __global__ void k() {}\n') == []
