"""C, C++, Java and JavaScript programs: compiled once, run per stdio test, judged like Python. Per language
and backend: correct, wrong answer, compile error, TLE, runtime error, early exit (expected verdicts are the
labels); plus the labelled cases of tests/data/code_cases_languages.jsonl and the unknown-language error."""
import json
from functools import cache
from pathlib import Path

import pytest

from rlvr import sandbox
from rlvr.sandbox import Job, Limits
from rlvr.sandbox.backends.bwrap_backend import bwrap_problem
from rlvr.sandbox.backends.docker_backend import docker_problem
from rlvr.sandbox.languages import LANGUAGES, java_class_name, missing_tools, parse_language

ADD = [{"input": "3 4\n", "output": "7\n"}, {"input": "3000000000 3000000000\n", "output": "6000000000\n"}]
LANGUAGE_CASES = Path(__file__).resolve().parents[1] / "data" / "code_cases_languages.jsonl"
BACKENDS = [pytest.param("docker", marks=pytest.mark.docker), "bwrap"]

# (language, label, program, expected verdicts of the two ADD tests)
PROGRAMS = [
    ("c", "correct", "#include <stdio.h>\nint main(void){long long a,b;scanf(\"%lld %lld\",&a,&b);printf(\"%lld\\n\",a+b);return 0;}\n", ["AC", "AC"]),
    ("c", "wrong", "#include <stdio.h>\nint main(void){int a,b;scanf(\"%d %d\",&a,&b);printf(\"%d\\n\",a+b);return 0;}\n", ["AC", "WA"]),
    ("c", "compile-error", "#include <stdio.h>\nint main(void){printf(\"%d\\n\", 7)}\n", ["CE", "CE"]),
    ("c", "tle", "int main(void){volatile unsigned long x=0;for(;;)x++;}\n", ["TLE", "TLE"]),
    ("c", "runtime-error", "#include <stdio.h>\nint main(void){int *p=0;printf(\"%d\\n\",*p);return 0;}\n", ["RE", "RE"]),
    ("c", "early-exit", "#include <stdlib.h>\nint main(void){exit(0);}\n", ["WA", "WA"]),
    ("cpp", "correct", "#include <iostream>\nint main(){long long a,b;std::cin>>a>>b;std::cout<<a+b<<std::endl;}\n", ["AC", "AC"]),
    ("cpp", "wrong", "#include <iostream>\nint main(){long long a,b;std::cin>>a>>b;std::cout<<a-b<<std::endl;}\n", ["WA", "WA"]),
    ("cpp", "compile-error", "#include <iostream>\nint main(){std::cout<<undeclared;}\n", ["CE", "CE"]),
    ("cpp", "tle", "int main(){volatile long x=0;while(true)x++;}\n", ["TLE", "TLE"]),
    ("cpp", "runtime-error", "#include <stdexcept>\nint main(){throw std::runtime_error(\"boom\");}\n", ["RE", "RE"]),
    ("cpp", "early-exit", "#include <cstdlib>\nint main(){std::exit(0);}\n", ["WA", "WA"]),
    ("cpp", "memory", "#include <vector>\n#include <iostream>\nint main(){std::vector<long> v(1L<<30);std::cout<<v[7];}\n", ["MLE", "MLE"]),
    ("java", "correct", "import java.util.*;\npublic class Main{public static void main(String[] x){Scanner s=new Scanner(System.in);"
     "System.out.println(s.nextLong()+s.nextLong());}}\n", ["AC", "AC"]),
    ("java", "other-public-class", "import java.util.*;\npublic class Solution{public static void main(String[] x){Scanner s=new Scanner(System.in);"
     "System.out.println(s.nextLong()+s.nextLong());}}\n", ["AC", "AC"]),
    ("java", "wrong", "import java.util.*;\npublic class Main{public static void main(String[] x){Scanner s=new Scanner(System.in);"
     "System.out.println(s.nextInt()+s.nextInt());}}\n", ["AC", "RE"]),
    ("java", "compile-error", "public class Main{public static void main(String[] x){System.out.println(7)}}\n", ["CE", "CE"]),
    ("java", "tle", "public class Main{public static void main(String[] x){long i=0;while(true){i++;}}}\n", ["TLE", "TLE"]),
    ("java", "runtime-error", "public class Main{public static void main(String[] x){int[] a=new int[1];System.out.println(a[3]);}}\n", ["RE", "RE"]),
    ("java", "early-exit", "public class Main{public static void main(String[] x){System.exit(0);}}\n", ["WA", "WA"]),
    ("java", "memory", "public class Main{public static void main(String[] x){long[] a=new long[1<<30];System.out.println(a[1]);}}\n", ["MLE", "MLE"]),
    ("javascript", "correct", "const [a,b]=require('fs').readFileSync(0,'utf8').trim().split(/\\s+/).map(BigInt);console.log(String(a+b));\n", ["AC", "AC"]),
    ("javascript", "wrong", "const [a,b]=require('fs').readFileSync(0,'utf8').trim().split(/\\s+/).map(Number);console.log((a+b)|0);\n", ["AC", "WA"]),
    ("javascript", "compile-error", "const x = ;\nconsole.log(7);\n", ["CE", "CE"]),
    ("javascript", "tle", "for(;;){}\n", ["TLE", "TLE"]),
    ("javascript", "runtime-error", "null.f();\n", ["RE", "RE"]),
    ("javascript", "early-exit", "process.exit(0);\nconsole.log(7);\n", ["WA", "WA"]),
]


@cache
def _judged(backend):
    problem = docker_problem() if backend == "docker" else bwrap_problem()
    if problem:
        return problem
    if backend == "bwrap":
        missing = {lang: missing_tools(LANGUAGES[lang]) for lang in LANGUAGES if missing_tools(LANGUAGES[lang])}
        if missing:
            return f"this machine lacks toolchains: {missing}"
    # A JVM or Node start takes ~0.5 s on a loaded machine: generous limits, except where TLE is the point.
    jobs = [Job(program, ADD, "stdio", "lines", Limits(time_s=2 if label == "tle" else 10), language)
            for language, label, program, _ in PROGRAMS]
    return sandbox.run_many(jobs, backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", PROGRAMS, ids=[f"{c[0]}-{c[1]}" for c in PROGRAMS])
def test_language_case(backend, case):
    judged = _judged(backend)
    if isinstance(judged, str):
        pytest.skip(f"{backend}: {judged}")
    result = judged[PROGRAMS.index(case)]
    assert result.codes == case[3], [(v.reason[:300], v.result.stderr[-300:]) for v in result.verdicts]
    if case[1] == "compile-error":  # the compiler's own message is the verdict's reason
        assert {"c": "error:", "cpp": "undeclared", "java": "error:", "javascript": "SyntaxError"}[case[0]] in \
            result.verdicts[0].reason


@pytest.mark.parametrize("backend", BACKENDS)
def test_labelled_language_cases(backend):
    judged = _judged(backend)  # skips the same way
    if isinstance(judged, str):
        pytest.skip(f"{backend}: {judged}")
    rows = [json.loads(line) for line in LANGUAGE_CASES.read_text().splitlines() if line.strip()]
    jobs = [Job(r["solution"], r["tests"], r["test_type"], r["checker"], Limits.from_mapping(r["limits"]),
                r.get("language", "python")) for r in rows]
    got = []
    for row, result in zip(rows, sandbox.run_many(jobs, backend=backend)):
        first = result.first_failure()
        got.append((row["id"], result.passed, first.verdict.value if first else "AC"))
    assert got == [(r["id"], r["expected_pass"], r["expected_failure_mode"]) for r in rows]


def test_unknown_language_is_an_error_naming_the_supported_ones():
    with pytest.raises(ValueError, match=r"unknown language 'rust'; supported: python, c, cpp, java, javascript"):
        Job("fn main() {}", ADD, language="rust")
    with pytest.raises(ValueError, match="can only have stdio tests"):
        Job("int f(int x){return x;}", {"fn_name": "f", "cases": [{"args": [1], "expected": 1}]}, "call", "json",
            language="cpp")
    assert [parse_language(n).name for n in ("C++", "js", "Python3", "node")] == ["cpp", "javascript", "python",
                                                                                 "javascript"]


def test_java_runs_main_or_the_one_public_top_level_class():
    assert java_class_name("class A {}\npublic final class Sol { public static class Inner {} }\n") == "Sol"
    assert java_class_name("class Main { public class Inner {} }\n") == "Main"
    assert java_class_name("// public class Fake\n/* public class Fake2 */ class X {}\n") == "Main"
    assert java_class_name('class M { String s = "public class Q {"; }\npublic class P {}') == "P"
    view = Job("public class Sol {}", ADD, language="java").sandbox_view()
    assert view["source"] == "Sol.java" and view["run"][-1] == "Sol" and view["compile"][-1] == "Sol.java"
    assert view["time_s"] == Limits().time_s + 1.0  # the JVM's start is not the program's time
    assert Job("print(1)", ADD).sandbox_view()["time_s"] == Limits().time_s
